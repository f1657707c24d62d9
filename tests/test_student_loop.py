"""The student loop end to end on the embedded default, through the CLI:

1. `orchard distill` records trajectories: the scripted teacher (a real endpoint that replies from a
   script) drives the bash harness through orchard's recording proxy on a real SWE-bench-format task
   in a real sandbox, and the grader resolves it;
2. `orchard train --model smollm2` fine-tunes SmolLM2 on them for 2 steps;
3. `orchard serve --model DIR` (a subprocess) loads the checkpoint and answers a chat completion and
   a forced tool call;
4. `orchard distill --harness bash --base-url SERVE_URL` runs one episode of the bash harness against
   the served student.

Cost, measured on a 2-core machine shared with other jobs: about 1.5 minutes of CPU, 1.5-4 minutes
of wall time (recording ~10-20 s, 2 training steps on ~840 tokens ~10-45 s, serve start ~10-18 s, the
student's episode with 2 calls of at most 48 tokens ~10-40 s), plus the session's shared pieces when
this module is first to need them: SmolLM2 converted from the GGUF once (tests/model_fixtures.py) and
the task's sandbox environment built once (tests/distill_world.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

import distill_world as dw
from orchard_cli.main import main

pytestmark = [pytest.mark.model, pytest.mark.bwrap, pytest.mark.slow]

MAX_TOKENS = "48"  # the server's cap for requests that set none (the bash harness sets none)
BASH = {"type": "function", "function": {
    "name": "bash", "description": "Run a bash command and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


def _cli(capsys: Any, *args: str) -> tuple[int, Any, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    try:
        return code, json.loads(captured.out), captured.err
    except json.JSONDecodeError:
        return code, captured.out, captured.err


def _post(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(f"{base_url}/chat/completions", json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Any]:
    return dw.world(tmp_path_factory)


@pytest.fixture(scope="module")
def recorded(world, tmp_path_factory) -> Path:
    """Trajectories recorded by `orchard distill` (the scripted teacher fixes the task)."""
    from orchard_cli.models.scripted import ScriptedEndpoint

    out = tmp_path_factory.mktemp("loop") / "teacher.jsonl"
    with pytest.MonkeyPatch.context() as mp, ScriptedEndpoint([dw.FIX, dw.DONE], cycle=True) as info:
        mp.setenv("ORCHARD_HOME", str(world["home"]))  # the task's environment is built once per session
        args = dw.distill_args(world, "one", out, info.base_url, "--teacher", "teacher", "--format", "json")
        assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def student(recorded, smollm2_home, tmp_path_factory) -> dict[str, Any]:
    """`orchard train --model smollm2` on the recorded trajectories: {'out', 'summary'}."""
    home = tmp_path_factory.mktemp("loop-home")
    (home / "cache").mkdir()
    # the session's converted SmolLM2 (tests/model_fixtures.py): `smollm2` is read from it, not the GGUF
    (home / "cache" / "models").symlink_to(smollm2_home / "cache" / "models", target_is_directory=True)
    out = tmp_path_factory.mktemp("trained") / "student"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHARD_HOME", str(home))
        code = main(["train", "-t", str(recorded), "--model", "smollm2", "--max-steps", "2", "--out", str(out),
                     "--threads", "1", "--max-seq-len", "1024", "--format", "json"])
    assert code == 0
    state = json.loads((out / "orchard_train.json").read_text())
    assert state["status"] == "finished", state
    summary = state["result"]  # what --format json printed
    return {"out": out, "summary": summary}


@pytest.fixture(scope="module")
def served(student, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """`orchard serve --model DIR` in a subprocess: its ready line ({'base_url', 'model', ...}).
    Its stderr goes to a file (a pipe nobody reads could fill and stall the server)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    log = tmp_path_factory.mktemp("serve") / "stderr.log"
    with log.open("w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "orchard_cli.main", "serve", "--model", str(student["out"]),
                                 "--port", "0", "--max-new-tokens", MAX_TOKENS, "--format", "json"],
                                stdout=subprocess.PIPE, stderr=err_file, text=True, env=env)
    code = None
    try:
        line = proc.stdout.readline()
        assert line, log.read_text()
        yield json.loads(line)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert code == 0, log.read_text()


def test_orchard_recorded_a_resolved_episode(recorded):
    (row,) = dw.lines(recorded)
    assert row["model"] == "teacher" and row["harness"] == "bash" and row["outcome"]["resolved"]
    assert len(row["calls"]) == 2 and all(call["status"] == 200 for call in row["calls"])
    assert row["messages"][-1]["role"] == "assistant"


def test_train_writes_a_checkpoint_of_the_recorded_episode(student):
    out, summary = student["out"], student["summary"]
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert summary["data"]["episodes_used"] == 1 and summary["samples"]["samples"] == 2  # one per model call
    for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md", "training_log.jsonl"):
        assert (out / name).is_file(), name
    log = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and all(r["trainable_tokens"] > 0 for r in log)


def test_serve_loads_the_checkpoint_and_answers_chat_and_a_forced_tool_call(served, student):
    base = served["base_url"]
    assert served["model"] == "student" and Path(served["source"]) == student["out"].resolve()
    assert httpx.get(f"{base}/models", timeout=30).json()["data"][0]["id"] == "student"

    plain = _post(base, {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 16})
    [choice] = plain["choices"]
    assert plain["model"] == "student" and choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and "tool_calls" not in choice["message"]
    assert choice["finish_reason"] in ("stop", "length") and 1 <= plain["usage"]["completion_tokens"] <= 16

    body = {"messages": [{"role": "user", "content": "List the files in the current directory."}],
            "tools": [BASH], "tool_choice": {"type": "function", "function": {"name": "bash"}}, "max_tokens": 32}
    [choice] = _post(base, body)["choices"]
    message = choice["message"]
    if message.get("tool_calls"):  # a well-formed call to the forced tool
        assert choice["finish_reason"] == "tool_calls"
        for call in message["tool_calls"]:
            assert call["type"] == "function" and call["id"].startswith("call_")
            assert call["function"]["name"] == "bash"
            assert isinstance(json.loads(call["function"]["arguments"]), dict)
    else:  # a tiny model may write unparsable JSON after the forced start: told so, as plain content
        assert message["content"].startswith('<tool_call>\n{"name": "bash", "arguments": ')
        assert "[orchard: tool call not understood: " in message["content"]


def test_the_bash_harness_runs_an_episode_against_the_served_student(served, world, tmp_path, capsys):
    base = served["base_url"]
    out = tmp_path / "student.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHARD_HOME", str(world["home"]))
        code, summary, err = _cli(capsys, *dw.distill_args(world, "one", out, base, "--teacher", "student",
                                                           "--max-turns", "2", "--timeout", "300", "--format", "json"))
    assert code == 0, err
    assert summary["planned"] == summary["ran"] == summary["written"] == 1 and summary["errors"] == 0, summary
    (row,) = dw.lines(out)
    assert row["model"] == "student" and row["harness"] == "bash" and row["metadata"]["upstream"] == base
    assert row["outcome"]["category"] not in ("env_error", "infra_error", "timeout"), row["outcome"]
    calls = row["calls"]
    assert 1 <= len(calls) <= 2 and all(call["status"] == 200 for call in calls)
    assert all(call["model"] == "student" and call["response"]["model"] == "student" for call in calls)
    # the replies are the student's own: greedy decoding gives the first one again for the same request
    first = calls[0]
    said, again = first["response"]["choices"][0]["message"], _post(base, first["request"])
    assert _reply(again["choices"][0]["message"]) == _reply(said)


def _reply(message: dict[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    """A message's content and calls, without the calls' ids (fresh on every reply)."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return message.get("content"), calls
