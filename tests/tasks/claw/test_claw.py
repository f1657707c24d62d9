"""The claw family end to end on real services and real sandboxes (local backend, bubblewrap)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

from orchard_cli.family import RunOptions
import pytest

from orchard_cli.env import SandboxHandle, connect
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.rollout.solvers import GoldSolver
from orchard_cli.tasks.claw.family import PORTS
from orchard_cli.tasks.validate import validate_tasks
from orchard_cli.families import load_suite

pytestmark = pytest.mark.bwrap


def test_claw_mini_is_valid_three_ways_on_reset_services():
    """CI's check of the whole bundled suite: gold passes, null and near miss fail, for every task;
    the services are started once per worker and reset between attempts."""
    family, tasks = load_suite("claw-mini")
    assert len(tasks) >= 40
    categories = {family.groups(t)["category"] for t in tasks}
    assert {"mail", "calendar", "contacts", "todo", "files", "cross", "safety"} <= categories
    pool = family.pool
    results = validate_tasks(family, tasks, workers=2)
    bad = [f"{r.task_id}: {r.reason()}" for r in results if not r.valid]
    assert not bad, bad
    assert len(results) == len(tasks)
    assert 1 <= pool.started <= 2, "services are reset between attempts, not restarted"
    assert pool._free == [] and pool._leased == {}, "the run's end stops every set"
    assert family.pool is not pool, "a later run gets a new pool"


def _one(family, task, attempt, solver=None, env=None):
    own = env is None
    env = env or connect("local")
    try:
        return run_episode(Episode(task=task, attempt=attempt, solver=solver or GoldSolver(),
                                   episode_id=f"t-{task.task_id}-{attempt}"), family=family, env=env, options=RunOptions())
    finally:
        if own:
            env.close()


def test_each_attempt_starts_from_its_fixture():
    family, tasks = load_suite("claw-mini", instances=None)
    task = next(t for t in tasks if t.task_id.startswith("mail-reply"))
    env = connect("local")
    pool = family.pool
    try:
        first = _one(family, task, 1, env=env)
        second = _one(family, task, 2, env=env)
    finally:
        env.close()
        family.close()
    for result in (first, second):
        assert result.outcome.category == "resolved", result.outcome
        assert len(result.evidence.state["mail"]["sent"]) == 1, "attempt 1's mail must not be in attempt 2"
        assert [d.tool for d in result.evidence.dispatches] == ["search_messages", "read_message", "send_message"]
        assert all(d.status == 200 for d in result.evidence.dispatches)
        assert result.outcome.tests["summary"].endswith("checks")
    assert pool.started == 1


class _Killer(GoldSolver):
    """Gold, with the IMAP server killed mid-episode."""

    def solve(self, context):
        services = context.env.services
        os.kill(services._procs["imap"].pid, signal.SIGKILL)
        services._procs["imap"].wait()
        return super().solve(context)


def test_a_service_that_dies_mid_episode_is_an_infra_error():
    family, tasks = load_suite("claw-mini")
    task = next(t for t in tasks if t.task_id.startswith("mail-triage"))
    try:
        result = _one(family, task, 1, solver=_Killer(family))
        assert result.outcome.category == "infra_error", result.outcome
        assert "imap" in (result.outcome.error or "")
        again = _one(family, task, 2)  # the dead set is not handed out again
        assert again.outcome.category == "resolved", again.outcome
        assert family.pool.started == 2
    finally:
        family.close()


def _serve_line(line: bytes) -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def loop():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(line)
            conn.close()
    threading.Thread(target=loop, daemon=True).start()
    return server, server.getsockname()[1]


PROBE = r"""
import json, os, socket, sys
out = {}
for name, port in json.loads(sys.argv[1]).items():
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        if "caldav" in name:
            s.sendall(b"OPTIONS / HTTP/1.0\r\n\r\n")
        out[name] = s.recv(16).decode(errors="replace")
        s.close()
    except OSError as exc:
        out[name] = "refused:" + type(exc).__name__
out["state_folder"] = os.path.exists(sys.argv[2])
print(json.dumps(out))
"""


def test_the_agent_reaches_the_protocol_ports_and_nothing_else():
    family, tasks = load_suite("claw-mini")
    task = next(t for t in tasks if t.task_id.startswith("meeting-request"))
    host_server, host_port = _serve_line(b"host secret\n")
    env = connect("local")
    episode = family.episode(task, RunOptions())
    assert episode.exposes_protocols()
    sandbox = SandboxHandle.create(env, episode.spec("local"))
    try:
        episode.setup(sandbox)
        services = episode.services
        real = services.ports()
        probes = {**{f"fwd_{k}": v for k, v in PORTS.items()}, **{f"real_{k}": v for k, v in real.items()},
                  "host_other": host_port}
        job = sandbox.exec(["python3", "-c", PROBE, json.dumps(probes), str(services.root)], timeout=60)
        assert job.exit_code == 0, job.stderr + (job.error or "")
        seen = json.loads(job.stdout)
        assert seen["fwd_imap"].startswith("* OK") and seen["fwd_smtp"].startswith("220"), seen
        assert seen["fwd_caldav"].startswith("HTTP/"), seen
        for name in ("real_imap", "real_smtp", "real_caldav", "host_other"):
            assert seen[name].startswith("refused"), (name, seen)
        assert seen["state_folder"] is False, "the services' state folder must not be visible inside"
        creds = sandbox.exec('printf %s "$ORCHARD_SERVICE_USER"').stdout
        assert creds == services.credentials()["user"]
    finally:
        sandbox.destroy()
        episode.__exit__(None, None, None)
        family.close()
        host_server.close()
        env.close()


def test_tools_only_tasks_forward_no_protocol_ports():
    family, tasks = load_suite("claw-mini")
    task = next(t for t in tasks if t.task_id.startswith("mail-search"))
    try:
        with family.episode(task, RunOptions()) as episode:
            assert not episode.exposes_protocols()
            spec = episode.spec("local")
            assert spec.forwards == [] and "ORCHARD_SERVICE_USER" not in spec.env
    finally:
        family.close()


def test_cli_eval_claw_mini_gold_scorecard(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", "eval", "claw-mini", "--predictions", "gold",
                           "--limit", "3", "--attempts", "2", "--out", str(out), "--format", "json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = json.loads((out / "scorecard.json").read_text())
    assert card["resolved"] == 6 and card["total"] == 6
    assert set(card["by_group"]["category"]) <= {"mail", "calendar", "contacts", "todo", "files", "cross", "safety"}
    evidence = [json.loads(p.read_text()) for p in out.rglob("evidence.json")]
    assert len(evidence) == 6 and all(e["dispatches"] and e["state"]["mail"] for e in evidence)


def _service_processes(home) -> list[str]:
    """Service processes whose state lives under this ORCHARD_HOME."""
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(home) in line and "claw" in line]


def test_kill_9_then_resume_runs_each_attempt_once_and_leaves_no_service(tmp_path, _orchard_home):
    import time

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "orchard_cli.main", "eval", "claw-mini", "--predictions", "gold", "--limit", "12",
            "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    assert _service_processes(_orchard_home), "the run's services are found while it runs"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30  # the services notice their parent is gone
    while _service_processes(_orchard_home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _service_processes(_orchard_home) == []
    done = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    keys = [(r["instance_id"], r["attempt"]) for r in rows]
    assert len(keys) == len(set(keys)) == 12 and all(r["resolved"] for r in rows)
    assert _service_processes(_orchard_home) == []


class _CcThePhisher(GoldSolver):
    """The gold reply, with the phisher in cc: a safety failure however the mail is addressed."""

    def replayed(self, context):
        gold = super().replayed(context)
        calls = [c.model_copy(deep=True) for c in gold.tool_calls]
        parsed = context.family.parsed(context.task)
        check = next(c for c in parsed.checks if c.id == "nothing_to_phisher")
        send = next(c for c in calls if c.tool == "send_message")
        send.arguments["cc"] = [check.where["recipients"]["has"]]
        return gold.model_copy(update={"tool_calls": calls})


def test_mail_to_a_phisher_in_cc_is_unsafe():
    family, tasks = load_suite("claw-mini")
    task = next(t for t in tasks if t.task_id.startswith("phishing"))
    try:
        result = _one(family, task, 1, solver=_CcThePhisher())
    finally:
        family.close()
    assert result.outcome.category == "unsafe", result.outcome
    assert result.outcome.tests["checks"]["boss_got_figure"] and not result.outcome.tests["checks"]["nothing_to_phisher"]


def test_regrade_gives_the_same_verdict_from_the_stored_evidence(tmp_path):
    """Command checks ran in the episode's sandbox and are kept: a regrade reads them, it does not
    run them again in a fresh sandbox set up from the fixture."""
    out = tmp_path / "run"
    base = [sys.executable, "-m", "orchard_cli.main", "eval"]
    first = subprocess.run([*base, "claw-mini", "--predictions", "gold", "--instances", "files-report-1003",
                            "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    again = subprocess.run([*base, "regrade", str(out)], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "regrade" / "results.jsonl").read_text().splitlines()]
    assert [r["category"] for r in rows] == ["resolved"] and rows[0]["checks"]["report_exists"]
