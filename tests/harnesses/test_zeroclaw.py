"""ZeroClaw: config and command line without the binary; one real episode where a binary exists
(marked `zeroclaw`: no registry reachable here ships one, so it may skip anywhere)."""

from __future__ import annotations

import tomllib

import pytest

from orchard_cli.harnesses import load_harness
from orchard_cli.harnesses.base import HarnessContext
from orchard_cli.harnesses.zeroclaw import BINARY, CONFIG_DIR, render_config

CONTEXT = HarnessContext(prompt='fix "it"', model="m/1", base_url="http://127.0.0.1:9/e/tok/v1", api_key="tok",
                         max_turns=7)


def test_config_names_a_custom_provider_at_the_episode():
    config = tomllib.loads(render_config(CONTEXT))
    assert config["providers"]["models"]["custom"]["orchard"] == {
        "uri": "http://127.0.0.1:9/e/tok/v1", "model": "m/1", "api_key": "tok"}
    agent = config["agents"]["orchard"]
    assert agent["model_provider"] == "custom.orchard"
    assert config["risk_profiles"][agent["risk_profile"]]["level"] == "full"
    assert config["runtime_profiles"][agent["runtime_profile"]]["max_tool_iterations"] == 7


def test_command_line_is_single_message_mode():
    argv = load_harness("zeroclaw").argv(CONTEXT)
    assert argv == [BINARY, "--config-dir", CONFIG_DIR, "agent", "-a", "orchard", "-m", 'fix "it"']


def test_without_a_binary_check_says_so_and_run_reports_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ORCHARD_HARNESSES_DIR", str(tmp_path / "none"))
    harness = load_harness("zeroclaw")
    problems = harness.check()
    assert len(problems) == 1 and "no zeroclaw binary" in problems[0] and "cargo install" in problems[0]
    assert harness.mounts() == [] and harness.version() is None
    run = harness.run(None, CONTEXT)  # type: ignore[arg-type]  # never reaches the sandbox
    assert run.exit_code is None and run.error == problems[0]


@pytest.mark.zeroclaw
@pytest.mark.bwrap
def test_zeroclaw_runs_a_shell_command_that_changes_the_workspace(rig):
    rig.start([{"tool_calls": [{"name": "shell", "arguments": {"command": "echo changed > hello.txt"}}]},
               "Done."], max_calls=6)
    harness = load_harness("zeroclaw")
    assert harness.check() == []
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, rig.context(sandbox, timeout_seconds=120))
    assert run.exit_code == 0 and run.error is None, run
    assert sandbox.read_file(f"{sandbox.workdir}/hello.txt") == b"changed\n"
    records = rig.episode.records
    assert records and records[0].endpoint == "chat" and records[0].request.get("stream") in (None, False)
