"""Nothing outlives its client, through the CLI and a real detached service: an eval killed with -9
while it holds a service sandbox leaves it to expire by heartbeat, and `orchard env gc` after the
service itself was killed (ORCHARD_ENV_URL still exported, the README's flow) reaps what it left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from orchard_cli.env.client import EnvClient
from orchard_cli.env.models import SandboxSpec
from orchard_cli.env.owner import owner_alive
from orchard_cli.models.scripted import ScriptedEndpoint

pytestmark = [pytest.mark.bwrap]

HEARTBEAT = 4


def orchard(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "orchard_cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


@pytest.fixture
def service(_orchard_home):
    up = orchard("env", "up", "--detach", "--port", "0")
    assert up.returncode == 0, up.stderr
    state = json.loads((_orchard_home / "env" / "service.json").read_text())
    yield state
    orchard("env", "down")


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_killed_eval_leaves_no_service_sandbox(service, tmp_path):
    url = service["url"]
    client = EnvClient(url)
    try:
        endpoint = ScriptedEndpoint([{"hang": True}], dialects=("chat",))
        with endpoint as model:
            proc = subprocess.Popen(
                [sys.executable, "-m", "orchard_cli.main", "eval", "calc", "--limit", "1", "--harness", "bash",
                 "--model", "m", "--base-url", model.base_url, "--out", str(tmp_path / "run")],
                env={**os.environ, "ORCHARD_ENV_URL": url, "ORCHARD_ENV_HEARTBEAT_TIMEOUT": str(HEARTBEAT)},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                _wait(lambda: client.list_sandboxes() and endpoint.requests, 180,
                      "the agent never held a sandbox and called the model")
                (held,) = client.list_sandboxes()
                assert held.spec.heartbeat_timeout == HEARTBEAT and held.spec.labels["orchard.client"]
                time.sleep(HEARTBEAT + 1)  # heartbeats keep it alive while the client lives
                assert [s.sandbox_id for s in client.list_sandboxes()] == [held.sandbox_id]
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                killed = time.monotonic()
                _wait(lambda: not client.list_sandboxes(), 60, "the dead client's sandbox was not reaped")
                assert time.monotonic() - killed < HEARTBEAT + 30  # heartbeat timeout + the reap interval
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        client.close()


@pytest.mark.parametrize("reaper", ["env gc", "eval --resume"])
def test_a_dead_clients_sandbox_goes_at_once_with_gc_or_resume(service, tmp_path, reaper):
    """A long heartbeat timeout (600 s): not the expiry, the dead client's pid reaps it."""
    url = service["url"]
    client = EnvClient(url)
    run = ["eval", "calc", "--limit", "1", "--harness", "bash", "--model", "m", "--out", str(tmp_path / "run")]
    env = {"ORCHARD_ENV_URL": url, "ORCHARD_ENV_HEARTBEAT_TIMEOUT": "600"}
    try:
        endpoint = ScriptedEndpoint([{"hang": True}, "nothing to do"], dialects=("chat",))
        with endpoint as model:
            proc = subprocess.Popen([sys.executable, "-m", "orchard_cli.main", *run, "--base-url", model.base_url],
                                    env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                _wait(lambda: client.list_sandboxes() and endpoint.requests, 180,
                      "the agent never held a sandbox and called the model")
                (held,) = client.list_sandboxes()
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
            finally:
                if proc.poll() is None:
                    proc.kill()
            if reaper == "env gc":
                done = orchard("env", "gc", env=env)
                assert done.returncode == 0 and held.sandbox_id in done.stdout.split(), done.stdout + done.stderr
            else:
                done = orchard(*run, "--base-url", model.base_url, "--resume", env=env, timeout=300)
                assert done.returncode in (0, 1), done.stderr[-2000:]  # graded: resolved or not
        assert held.sandbox_id not in [s.sandbox_id for s in client.list_sandboxes()]
    finally:
        client.close()


def test_gc_after_the_service_was_killed_with_the_url_still_set(service, _orchard_home):
    url = service["url"]
    client = EnvClient(url)
    ids = [client.create_sandbox(SandboxSpec(memory="256Mi")).sandbox_id for _ in range(2)]
    client._beating.set()  # stop heartbeating: this test's client stays alive, its sandboxes must go by gc
    os.kill(service["pid"], signal.SIGKILL)
    _wait(lambda: not owner_alive(service["owner"]), 10, "the service did not die")
    gc = orchard("env", "gc", env={"ORCHARD_ENV_URL": url})
    assert gc.returncode == 0, gc.stderr
    assert set(ids) <= set(gc.stdout.split()), gc.stdout + gc.stderr
    assert "reaping in-process" in gc.stderr
    folder = _orchard_home / "env" / "local"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_an_interrupted_eval_says_it_is_incomplete(tmp_path):
    """Ctrl-C after 1 of 3 attempts: the terminal's summary line and the Markdown headline say the
    run is incomplete (not '0 / 1 = 0%' read as a score), as the HTML page does."""
    out = tmp_path / "run"
    with ScriptedEndpoint(["nothing to do", {"hang": True}], dialects=("chat",)) as model:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchard_cli.main", "eval", "calc", "--limit", "3", "--harness", "bash",
             "--model", "m", "--base-url", model.base_url, "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait(lambda: (out / "results.jsonl").exists() and (out / "results.jsonl").read_text().count("\n") == 1,
                  180, "the first attempt never finished")
            time.sleep(1)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "INCOMPLETE" in err and "1 of 3 selected attempt(s) finished" in " ".join(err.split()), err[-2000:]
    markdown = (out / "scorecard.md").read_text()
    assert "**Run incomplete: 2 of 3 selected attempt(s) never ran.**" in markdown
    assert "Run incomplete" in (out / "scorecard.html").read_text()


def test_a_grading_run_killed_for_memory_is_an_env_error(tmp_path):
    """The tests ran out of the sandbox's memory: env_error 'out of memory (limit X)', not a
    verdict on the patch (exit 137 read as a failing test)."""
    from orchard_cli.env.backends import load_backend

    if "memory_limit" in load_backend("local").unsupported:  # no memory cgroup: it would take 2 GiB
        pytest.skip("the local backend has no memory limit on this machine")
    task = {"instance_id": "acme__greedy-1", "problem_statement": "add subtracts",
            "files": {"calc.py": "def add(a, b):\n    return a - b\n"},
            "fixed": {"calc.py": "def add(a, b):\n    return a + b\n"},
            "test_cmd": "python3 -c 'block = bytearray(2 << 30); print(len(block))'"}
    data = tmp_path / "greedy.jsonl"
    data.write_text(json.dumps(task) + "\n")
    out = tmp_path / "run"
    done = orchard("eval", "calc", "--dataset", str(data), "--predictions", "gold", "--out", str(out),
                   "--max-errors", "1", "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert row["category"] == "env_error" and row["error"] == "out of memory (limit 512Mi)", row
