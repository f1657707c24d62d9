"""`orchard distill --harness codex`: the real Codex CLI (scripts/install-harnesses.sh) on a real
SWE-bench-format task, bound into the task's sandbox beside its /opt, speaking the Responses API
through the recording proxy to a chat-only scripted teacher; its trajectory comes out in chat form."""

from __future__ import annotations

import json
import os

import pytest

import distill_world as dw
from orchard_cli.trajectory import read_trajectories
from orchard_cli.harnesses import load_harness
from orchard_cli.main import main
from orchard_cli.models.scripted import ScriptedEndpoint

pytestmark = [pytest.mark.harness, pytest.mark.bwrap, pytest.mark.slow]


def test_codex_distills_a_resolved_trajectory(tmp_path_factory, tmp_path, capsys, monkeypatch):
    problems = load_harness("codex").check()
    if problems:
        if os.environ.get("ORCHARD_TEST_STRICT") == "1":
            pytest.fail(f"prerequisite missing under ORCHARD_TEST_STRICT=1: {problems[0]}")
        pytest.skip(f"codex is not installed: {problems[0]}")
    w = dw.world(tmp_path_factory)
    monkeypatch.setenv("ORCHARD_HOME", str(w["home"]))
    fix = {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": dw.FIX_COMMAND}}]}
    out = tmp_path / "codex.jsonl"
    with ScriptedEndpoint([fix, dw.DONE], dialects=("chat",)) as info:
        code = main([*dw.distill_args(w, "one", out, info.base_url), "--harness", "codex",
                     "--teacher", "teacher-x", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    assert json.loads(captured.out)["resolved"] == 1
    (record,) = read_trajectories(out)
    assert record.harness == "codex" and record.harness_version == "0.171.0" and record.outcome.resolved
    assert all(c.endpoint == "responses" and c.upstream_endpoint == "chat" for c in record.calls)
    assert [line for line in record.patch.splitlines() if line.startswith("diff --git")] == [
        "diff --git a/calc/__init__.py b/calc/__init__.py"]  # codex's own files stay out of the patch
    roles = [m["role"] for m in record.messages]
    assert roles[0] == "system" and roles[-3:] == ["assistant", "tool", "assistant"]
    call = record.messages[-3]["tool_calls"][0]["function"]
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {"cmd": dw.FIX_COMMAND}
    assert "calc/__init__.py" in record.messages[-2]["content"]
    assert "exec_command" in [t["function"]["name"] for t in record.tools]
