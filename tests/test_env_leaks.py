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
