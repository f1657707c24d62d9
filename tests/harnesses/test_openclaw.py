"""The real OpenClaw (installed by scripts/install-harnesses.sh) in a local sandbox, through the
real recording proxy, against scripted chat completions. One episode: OpenClaw needs ~20 s of CPU
to start here."""

from __future__ import annotations

import json

import pytest

from orchard_cli.harnesses import load_harness
from orchard_cli.harnesses.openclaw import render_config

pytestmark = [pytest.mark.harness, pytest.mark.bwrap]


def test_openclaw_runs_exec_that_changes_the_workspace(rig, installed_harnesses):
    rig.start([{"tool_calls": [{"name": "exec", "arguments": {"command": "echo changed > hello.txt"}}]},
               "Done: hello.txt now says changed."], max_calls=6)
    harness = load_harness("openclaw")
    assert harness.check() == [] and harness.version() == "2026.9.6"
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, rig.context(sandbox, timeout_seconds=300))
    assert run.exit_code == 0 and not run.timed_out and run.error is None, run
    assert sandbox.read_file(f"{sandbox.workdir}/hello.txt") == b"changed\n"
    assert rig.changed(sandbox) == ["hello.txt"]          # OPENCLAW_HOME stays out of the repo
    assert run.info["tool_calls"] == "1" and run.info["last_message"] == "Done: hello.txt now says changed."
    records = rig.episode.records
    assert len(records) == rig.endpoint.served == 2
    assert all(r.endpoint == "chat" and r.stream and r.status == 200 for r in records)
    assert "exec" in {t["function"]["name"] for t in records[0].request["tools"]}
    assert "Replace the text in hello.txt" in json.dumps(records[0].request["messages"])
    call = records[0].response["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"command": "echo changed > hello.txt"}
    assert any(m["role"] == "tool" for m in records[1].request["messages"])
    assert records[1].response["choices"][0]["message"]["content"] == "Done: hello.txt now says changed."


def test_openclaw_config_points_at_the_episode():
    from orchard_cli.harnesses.base import HarnessContext

    context = HarnessContext(prompt="p", model="m-1", base_url="http://127.0.0.1:9/e/tok/v1", api_key="tok")
    config = render_config(context)
    provider = config["models"]["providers"]["orchard"]
    assert config["models"]["mode"] == "replace"
    assert provider == {"baseUrl": "http://127.0.0.1:9/e/tok/v1", "apiKey": "tok", "api": "openai-completions",
                        "models": [{"id": "m-1", "name": "m-1"}]}
    assert config["agents"]["defaults"]["model"]["primary"] == "orchard/m-1"
    argv = load_harness("openclaw").argv(context, "/workspace")
    assert argv[2:4] == ["agent", "exec"] and argv[argv.index("--cwd") + 1] == "/workspace"
    assert argv[argv.index("--model") + 1] == "orchard/m-1" and "--json" in argv
    assert int(argv[argv.index("--timeout") + 1]) == 1800 - 15
