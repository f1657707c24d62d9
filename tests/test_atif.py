"""ATIF out and in: `orchard distill export --format atif` writes one ATIF-v1.4 trajectory per
episode, checked here against the schema's rules as ATIF's RFC states them (read independently of
orchard's model: step ids from 1, agent-only fields, observations naming their own step's tool
calls, token ids where recorded); `orchard view` and `orchard train` read such a file back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchard_cli.training.synthetic import synthetic_trajectory
from orchard_cli.trajectory import read_trajectories

ORCHARD = [sys.executable, "-m", "orchard_cli.main"]
AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")
STEP_FIELDS = {"step_id", "timestamp", "source", "model_name", "reasoning_effort", "message", "reasoning_content",
               "tool_calls", "observation", "metrics", "extra"}
METRIC_FIELDS = {"prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd", "prompt_token_ids",
                 "completion_token_ids", "logprobs", "extra"}


def check_atif(doc: dict) -> None:
    """The ATIF-v1.4 rules, as plain assertions on the JSON."""
    assert doc["schema_version"] == "ATIF-v1.4"
    assert set(doc) <= {"schema_version", "session_id", "agent", "steps", "notes", "final_metrics",
                        "continued_trajectory_ref", "extra"}
    assert isinstance(doc["session_id"], str) and {"name", "version"} <= set(doc["agent"])
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
    for step in doc["steps"]:
        assert set(step) <= STEP_FIELDS and step["source"] in ("system", "user", "agent")
        assert isinstance(step["message"], (str, list))
        if step["source"] != "agent":
            assert not any(k in step for k in AGENT_ONLY), step
        ids = {c["tool_call_id"] for c in step.get("tool_calls", [])}
        for call in step.get("tool_calls", []):
            assert set(call) == {"tool_call_id", "function_name", "arguments"} and isinstance(call["arguments"], dict)
        for result in step.get("observation", {}).get("results", []):
            assert result.get("source_call_id") is None or result["source_call_id"] in ids
        assert set(step.get("metrics", {})) <= METRIC_FIELDS
    assert doc["final_metrics"]["total_steps"] == len(doc["steps"])


@pytest.fixture
def trajectories(tmp_path):
    rows = [synthetic_trajectory(41, calls=3), synthetic_trajectory(42, calls=2, resolved=False)]
    rows[0].calls[0].prompt_token_ids = [1, 2, 3]
    rows[0].calls[0].completion_token_ids = [7, 8]
    rows[0].calls[0].logprobs = [-0.5, -0.25]
    path = tmp_path / "traj.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    return path, rows


def test_export_is_valid_atif_and_reads_back(trajectories, tmp_path):
    path, rows = trajectories
    out = tmp_path / "atif"
    proc = subprocess.run([*ORCHARD, "distill", "export", str(path), "--format", "atif", "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["format"] == "atif" and result["rows"] == 2
    index = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    assert [i["schema_version"] for i in index] == ["ATIF-v1.4", "ATIF-v1.4"]
    first = json.loads((out / index[0]["file"]).read_text())
    check_atif(first)
    agent_steps = [s for s in first["steps"] if s["source"] == "agent"]
    assert len(agent_steps) == 3 and agent_steps[0]["tool_calls"] and agent_steps[0]["observation"]["results"]
    assert agent_steps[0]["metrics"]["prompt_token_ids"] == [1, 2, 3]
    assert agent_steps[0]["metrics"]["completion_token_ids"] == [7, 8] and agent_steps[0]["metrics"]["logprobs"] == [-0.5, -0.25]
    assert first["extra"]["orchard"]["resolved"] is True and first["extra"]["orchard"]["task_id"] == rows[0].task_id
    check_atif(json.loads((out / index[1]["file"]).read_text()))

    back = read_trajectories(out / index[0]["file"])[0]
    assert back.messages == rows[0].messages  # the conversation survives the round trip
    assert back.outcome.resolved and back.task_id == rows[0].task_id

    page = tmp_path / "page.html"
    proc = subprocess.run([*ORCHARD, "view", str(out / index[0]["file"]), "--out", str(page)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert rows[0].task_id in page.read_text()


def test_a_broken_atif_file_is_one_line(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"schema_version": "ATIF-v1.4", "session_id": "s", "agent": {"name": "a", "version": "1"},
                               "steps": [{"step_id": 2, "source": "user", "message": "hi"}]}))
    proc = subprocess.run([*ORCHARD, "view", str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "step_id" in proc.stderr and "Traceback" not in proc.stderr


def _later(version: str, message) -> dict:
    return {"schema_version": version, "session_id": "s", "agent": {"name": "a", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": message, "is_copied_context": True},
                      {"step_id": 2, "source": "agent", "message": [{"type": "text", "text": "run "}, {"type": "text", "text": "it"}],
                       "llm_call_count": 1, "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"cmd": "ls"}}],
                       "observation": {"results": [{"source_call_id": "c1", "content": [{"type": "text", "text": "a.txt"}]}]}},
                      {"step_id": 3, "source": "agent", "message": "done", "llm_call_count": 0}]}


@pytest.mark.parametrize("version", ["ATIF-v1.5", "ATIF-v1.6"])
def test_later_atif_versions_read_their_text_parts(tmp_path, version):
    from orchard_cli.trajectory import read_atif

    path = tmp_path / "t.json"
    path.write_text(json.dumps(_later(version, [{"type": "text", "text": "list files"}])))
    got = read_atif(path)
    assert got.outcome.details["atif_schema_version"] == version
    assert [m["content"] for m in got.messages] == ["list files", "run it", "a.txt", "done"]
    assert got.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}


def test_an_image_or_a_newer_version_is_refused_by_name(tmp_path):
    image = tmp_path / "image.json"
    image.write_text(json.dumps(_later("ATIF-v1.6", [{"type": "image", "source": {"media_type": "image/png", "path": "x.png"}}])))
    proc = subprocess.run([*ORCHARD, "view", str(image)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "step 1 holds an image content part" in proc.stderr and "Traceback" not in proc.stderr
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(_later("ATIF-v1.7", "hi")))
    proc = subprocess.run([*ORCHARD, "view", str(newer)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "ATIF-v1.7 (it adds embedded subagent trajectories" in proc.stderr
    assert "ATIF-v1.0 to ATIF-v1.6" in proc.stderr
