"""`orchard distill` end to end: the real local backend, the real recording proxy, the scripted
model endpoint and the bash harness on a real SWE-bench-format task; resume, two teachers in one
file, --keep resolved, upstream failures, kill -9 mid-run, and the upstream key kept off disk."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest

import distill_world as dw
from orchard_cli.rollout.distill_run import DistillConfig, plan_distill
from orchard_cli.trajectory import read_trajectories
from orchard_cli.main import main
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.trajectory import Trajectory

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture
def w(tmp_path_factory, monkeypatch):
    world = dw.world(tmp_path_factory)
    monkeypatch.setenv("ORCHARD_HOME", str(world["home"]))
    return world


def cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_two_teachers_in_one_file_and_resume_skips_finished_episodes(w, tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    with ScriptedEndpoint([dw.FIX, dw.DONE], cycle=True) as info:
        args = dw.distill_args(w, "one", out, info.base_url, "--teacher", "teacher-a", "--teacher", "teacher-b")
        code, stdout, stderr = cli(capsys, *args, "--price", "teacher-a=1,2", "--format", "json")
        assert code == 0, stderr
        summary = json.loads(stdout)  # stdout holds the JSON summary only; talk went to stderr
        assert summary["planned"] == summary["ran"] == summary["written"] == 2 and summary["resolved"] == 2
        a, b = summary["teachers"]["teacher-a"], summary["teachers"]["teacher-b"]
        assert a["resolved"] == b["resolved"] == 1 and summary["complete"]
        assert a["cost_usd"] == pytest.approx((a["tokens_in"] + 2 * a["tokens_out"]) / 1e6) and a["tokens_in"] > 0
        assert b["cost_usd"] is None and summary["cost_usd"] is None  # teacher-b has no --price: unknown
        assert "distill" in stderr and "2/2" in stderr
        rows = dw.lines(out)
        assert sorted(r["model"] for r in rows) == ["teacher-a", "teacher-b"]
        assert len({r["episode_id"] for r in rows}) == 2 and all(r["outcome"]["resolved"] for r in rows)
        assert all(Trajectory.model_validate(r).calls for r in rows)

        code, stdout, stderr = cli(capsys, *args, "--resume", "--format", "json")
        again = json.loads(stdout)
        assert code == 0 and again["ran"] == 0 and again["skipped"] == 2 and again["finished"] == 2
        assert len(dw.lines(out)) == 2

        # Resume works across teachers: a third teacher adds only its own episode.
        code, stdout, _ = cli(capsys, *args, "--teacher", "teacher-c", "--resume", "--format", "json")
        third = json.loads(stdout)
        assert code == 0 and third["ran"] == 1 and third["skipped"] == 2 and third["planned"] == 3
        assert [r["model"] for r in dw.lines(out)][-1] == "teacher-c"

        code, _, stderr = cli(capsys, *args)
        assert code == 2 and "already holds trajectories" in stderr and "--resume" in stderr


def test_upstream_failures_are_infra_errors_the_run_goes_on_and_keep_resolved(w, tmp_path):
    out = tmp_path / "kept.jsonl"
    config = DistillConfig(suite=str(w["two"]), repo_mirror=str(w["mirror"]), teachers=["t"], out=str(out),
                           keep="resolved", proxy={"max_retries": 0, "retry_backoff_s": 0.01})
    seen = []
    # Episode 1: every call fails (the bash agent tries 3 times); episode 2 fixes the bug.
    with ScriptedEndpoint([dw.FAIL] * 3 + [dw.FIX, dw.DONE]) as info:
        summary = plan_distill(config.model_copy(update={"base_url": info.base_url})).execute(
            lambda record, totals: seen.append(record))
    assert [r.outcome.category for r in seen] == ["infra_error", "resolved"]
    failed = seen[0]
    assert "failed upstream" in failed.outcome.details["error"] and failed.calls
    assert all(c.error and c.error.status == 500 for c in failed.calls)
    assert summary.errors == 1 and summary.resolved == 1 and not summary.complete
    assert [r["outcome"]["category"] for r in dw.lines(out)] == ["resolved"]  # --keep resolved
    ledger = dw.lines(out.with_name("kept.run") / "episodes.jsonl")
    assert [(e["category"], e["kept"]) for e in ledger] == [("infra_error", False), ("resolved", True)]

    # --resume runs the errored episode again (and only it); an empty patch is not kept either.
    with ScriptedEndpoint([dw.NOTHING]) as info:
        summary = plan_distill(config.model_copy(update={"base_url": info.base_url}), resume=True).execute()
    assert summary.ran == 1 and summary.skipped == 1 and summary.errors == 0 and summary.complete
    assert summary.by_category == {"empty_patch": 1, "resolved": 1} and summary.written == 0
    assert len(dw.lines(out)) == 1 and len(dw.lines(out.with_name("kept.run") / "episodes.jsonl")) == 3

    # Nothing left to do: an unresolved (kept out) episode is finished too.
    with ScriptedEndpoint([]) as info:
        plan = plan_distill(config.model_copy(update={"base_url": info.base_url}), resume=True)
    assert plan.pending == []


def test_kill_9_mid_run_leaves_only_whole_lines_and_resume_completes(w, tmp_path, capsys):
    out = tmp_path / "killed.jsonl"
    with ScriptedEndpoint([dw.SLOW_FIX, dw.DONE], cycle=True) as info:
        args = dw.distill_args(w, "two", out, info.base_url, "--teacher", "t", "--attempts", "2")
        proc = subprocess.Popen([sys.executable, "-m", "orchard_cli.main", *args], cwd=tmp_path,
                                env={**os.environ, "ORCHARD_HOME": str(w["home"])},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(1.0)  # the next episode is under way
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc.stderr.close()
    before = dw.lines(out)  # whole lines only: lines() fails on a torn tail
    assert 1 <= len(before) < 4
    assert all(Trajectory.model_validate(r).outcome.resolved for r in before)

    with ScriptedEndpoint([dw.FIX, dw.DONE], cycle=True) as info:  # the killed run left its script mid-way
        args = dw.distill_args(w, "two", out, info.base_url, "--teacher", "t", "--attempts", "2")
        code, stdout, stderr = cli(capsys, *args, "--resume", "--format", "json")
        assert code == 0, stderr
        summary = json.loads(stdout)
        assert summary["skipped"] == len(before) and summary["ran"] == 4 - len(before)
        assert summary["finished"] == 4 and summary["complete"]
    rows = read_trajectories(out)
    assert len(rows) == 4 and all(r.outcome.resolved for r in rows)
    assert sorted((r.task_id, r.attempt) for r in rows) == sorted(
        (t, k) for t in ("acme__calc-1", "acme__calc-2") for k in (1, 2))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_exits_130_keeps_finished_episodes_and_leaves_no_sandbox(w, tmp_path, signum):
    """Ctrl-C, and SIGTERM the same way (a CI runner or a cluster stopping the job)."""
    out = tmp_path / "interrupted.jsonl"
    sandboxes = w["home"] / "env" / "local"
    with ScriptedEndpoint([dw.FIX, dw.DONE, {**dw.NOTHING, "hang": True}], cycle=True) as info:
        args = dw.distill_args(w, "two", out, info.base_url, "--teacher", "t")
        proc = subprocess.Popen([sys.executable, "-m", "orchard_cli.main", *args], cwd=tmp_path,
                                env={**os.environ, "ORCHARD_HOME": str(w["home"])},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 180
        while time.time() < deadline and not (out.exists() and out.read_bytes().count(b"\n") == 1):
            time.sleep(0.1)
        time.sleep(2)  # the second episode waits on a model call that never answers
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err[-2000:]
    assert [r["outcome"]["category"] for r in dw.lines(out)] == ["resolved"]
    summary = json.loads((tmp_path / "interrupted.run" / "summary.json").read_text())
    assert summary["finished"] == 1 and summary["planned"] == 2 and not summary["complete"]
    owner = f":{proc.pid}:"
    left = [p for p in sandboxes.glob("*/meta.json") if owner in json.loads(p.read_text()).get("owner", "")]
    assert not left, "a sandbox outlived the run"


def test_the_upstream_key_never_reaches_any_file_the_run_wrote(w, tmp_path, capsys, monkeypatch):
    key = "sk-orchard-test-" + secrets.token_hex(16)
    monkeypatch.setenv("ORCHARD_TEST_UPSTREAM_KEY", key)
    snoop = {"tool_calls": [{"name": "bash", "arguments": {
        "command": "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | sort -u; " + dw.FIX_COMMAND}}]}
    folder = tmp_path / "secret-run"
    with ScriptedEndpoint([snoop, dw.DONE], key_env="ORCHARD_TEST_UPSTREAM_KEY") as info:
        code, _, stderr = cli(capsys, *dw.distill_args(w, "one", folder / "t.jsonl", info.base_url),
                              "--teacher", "t", "--api-key-env", "ORCHARD_TEST_UPSTREAM_KEY")
    assert code == 0 and key not in stderr
    record = read_trajectories(folder / "t.jsonl")[0]
    assert record.outcome.resolved  # the endpoint checked the key: it was sent upstream
    assert "ORCHARD_PROXY_URL" in json.dumps(record.messages)  # the snooping command did run
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert len(files) >= 5
    for path in files:
        assert key.encode() not in path.read_bytes(), f"the upstream key leaked into {path}"


def test_bad_usage_is_one_line_and_exit_2(w, tmp_path, capsys):
    base = ["distill", str(w["one"]), "--repo-mirror", str(w["mirror"]), "--out", str(tmp_path / "x.jsonl")]
    cases = [
        (["distill", "--teacher", "t", "--base-url", "scripted"], "orchard distill SUITE"),
        ([*base, "--teacher", "t", "--base-url", "scripted", "--keep", "some"], "--keep"),
        ([*base, "--teacher", "t", "--base-url", "scripted", "--harness", "nosuch"], "unknown harness 'nosuch'"),
        ([*base, "--teacher", "t", "--base-url", "nosuch"], "neither an http(s) URL"),
        ([*base, "--base-url", "http://127.0.0.1:9/v1"], "--model MODEL"),
        ([*base, "--teacher", "t", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "ORCHARD_NO_SUCH_VAR"],
         "ORCHARD_NO_SUCH_VAR"),
        ([*base, "--teacher", "t", "--base-url", "scripted", "--price", "t=cheap"], "MODEL=IN,OUT"),
        ([*base[:-1], str(tmp_path), "--teacher", "t", "--base-url", "scripted"], "is a folder"),
    ]
    for args, message in cases:
        code, stdout, stderr = cli(capsys, *args)
        assert code == 2 and message in stderr, (args, stderr)
        assert stdout == "" and len(stderr.strip().splitlines()) <= 2, stderr
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "x.run").exists()


def test_eval_with_the_bash_harness_writes_trajectories_and_tokens(w, tmp_path, capsys):
    run = tmp_path / "eval-run"
    code, stdout, stderr = cli(capsys, "eval", str(w["one"]), "--repo-mirror", str(w["mirror"]),
                               "--harness", "bash", "--model", "M", "--base-url", "scripted",
                               "--out", str(run), "--format", "json")
    assert code == 0, stderr
    card = json.loads(stdout)
    assert card["total"] == 1 and card["by_category"]["empty_patch"] == 1  # the echo model edits nothing
    assert card["tokens"]["input"] > 0 and card["tokens"]["output"] > 0
    assert card["cost_usd"] == 0.0 and card["cost_known"]  # an in-package model costs nothing
    assert card["reproducibility"]["harness"] == "bash" and card["reproducibility"]["harness_version"]
    result = dw.lines(run / "results.jsonl")[0]
    assert result["trajectory"] == "trajectories.jsonl"
    (record,) = read_trajectories(run / "trajectories.jsonl")
    assert record.outcome.category == "empty_patch" and record.model == "M" and record.harness == "bash"
    assert record.tokens_in == card["tokens"]["input"] and record.calls and record.messages

    # A model that fixes the bug, at a URL: resolved, graded in a fresh sandbox, cost unknown.
    run2 = tmp_path / "eval-run-2"
    with ScriptedEndpoint([dw.FIX, dw.DONE]) as info:
        code, stdout, stderr = cli(capsys, "eval", str(w["one"]), "--repo-mirror", str(w["mirror"]),
                                   "--harness", "bash", "--model", "M", "--base-url", info.base_url,
                                   "--out", str(run2), "--format", "json")
    card = json.loads(stdout)
    assert code == 0 and card["resolved"] == 1 and card["cost_usd"] is None, stderr
    (record,) = read_trajectories(run2 / "trajectories.jsonl")
    assert record.outcome.resolved and "+    return a + b" in record.patch
    assert (run2 / "predictions.jsonl").read_text().count("return a + b") == 1
