"""`orchard env ...` end to end: real subprocesses, a real detached service, real sandboxes.

The backend is local (bubblewrap) unless ORCHARD_TEST_BACKEND names another.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchard_cli.env.client import EnvClient
from orchard_cli.env.daemon import ServiceState, _write_state
from orchard_cli.env.models import ExecRequest, SandboxSpec
from orchard_cli.env.owner import owner_alive, process_start_time

BACKEND = os.environ.get("ORCHARD_TEST_BACKEND", "local")
needs_backend = {"local": pytest.mark.bwrap, "docker": pytest.mark.docker,
                 "kubernetes": pytest.mark.k8s}.get(BACKEND, lambda test: test)


def orchard(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("orchard")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "orchard_cli.main"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def _service_json(home: Path) -> dict:
    return json.loads((home / "env" / "service.json").read_text())


def _processes_with(argv: list[str]) -> list[int]:
    wanted = "\0".join(argv).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "cmdline").read_bytes().rstrip(b"\0") == wanted:
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def _wait_gone(owner: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while owner_alive(owner):
        assert time.monotonic() < deadline, f"{owner} still alive"
        time.sleep(0.05)


@pytest.fixture
def down_at_end():
    yield
    orchard("env", "down")


def test_unknown_backend_is_one_line_and_exit_2():
    for args in (("env", "up", "--backend", "nope"), ("env", "gc", "--backend", "nope"),
                 ("env", "smoke", "--backend", "nope")):
        result = orchard(*args)
        assert result.returncode == 2, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "unknown backend 'nope'" in lines[0] and "local" in lines[0]
        assert result.stdout == ""


def test_status_and_ls_with_nothing_running_exit_3(_orchard_home):
    status = orchard("env", "status")
    assert status.returncode == 3 and "no Orchard Env service is running" in status.stderr
    as_json = orchard("env", "status", "--format", "json")
    assert as_json.returncode == 3 and json.loads(as_json.stdout)["running"] is False
    assert orchard("env", "ls").returncode == 3
    down = orchard("env", "down")
    assert down.returncode == 0 and "no Orchard Env service was running" in down.stderr


def test_print_manifests_needs_kubernetes():
    assert orchard("env", "up", "--backend", "local", "--print-manifests").returncode == 2
    result = orchard("env", "up", "--backend", "kubernetes", "--print-manifests", "--port", "9999")
    assert result.returncode == 0, result.stderr
    assert "kind: Deployment" in result.stdout and "9999" in result.stdout


@needs_backend
def test_detached_service_lifecycle_and_gc_after_kill_9(_orchard_home, down_at_end):
    home = _orchard_home
    up = orchard("env", "up", "--detach", "--backend", BACKEND, "--port", "0")
    assert up.returncode == 0, up.stderr
    state = _service_json(home)
    url = state["url"]
    assert url.startswith("http://127.0.0.1:")
    assert f"export ORCHARD_ENV_URL={url}" in up.stdout.splitlines()
    assert f"API key: {home / 'env' / 'api-key'}" in up.stdout
    key = (home / "env" / "api-key").read_text().strip()
    for where in ("service.json", "service.log"):
        assert key not in (home / "env" / where).read_text()
    assert key not in up.stdout + up.stderr

    again = orchard("env", "up", "--detach", "--port", "0")
    assert again.returncode == 0 and "already running" in again.stdout and url in again.stdout
    other = orchard("env", "up", "--backend", "kubernetes" if BACKEND != "kubernetes" else "local")
    assert other.returncode == 2 and "already runs" in other.stderr

    status = orchard("env", "status", "--format", "json")
    assert status.returncode == 0, status.stderr
    answer = json.loads(status.stdout)
    assert {k: answer[k] for k in ("running", "url", "backend", "sandboxes", "pid")} == {
        "running": True, "url": url, "backend": BACKEND, "sandboxes": 0, "pid": state["pid"]}

    smoke = orchard("env", "smoke", env={"ORCHARD_ENV_URL": url})
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert smoke.stdout.startswith("orchard env smoke: ok") and f"via {url}" in smoke.stdout

    client = EnvClient(url)
    token = str(random.randint(100000, 999999))
    ids = [client.create_sandbox(SandboxSpec(memory="256Mi")).sandbox_id for _ in range(2)]
    for sid in ids:
        client.exec(sid, ExecRequest(command=["sleep", token]))
    deadline = time.monotonic() + 10
    while len(_processes_with(["sleep", token])) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_processes_with(["sleep", token])) == 2
    listed = orchard("env", "ls", "--format", "json")
    assert listed.returncode == 0 and {s["sandbox_id"] for s in json.loads(listed.stdout)} == set(ids)
    table = orchard("env", "ls")
    assert all(sid in table.stdout for sid in ids) and "isolation" in table.stdout

    os.kill(state["pid"], signal.SIGKILL)
    _wait_gone(state["owner"])
    assert orchard("env", "status").returncode == 3

    gc = orchard("env", "gc")
    assert gc.returncode == 0, gc.stderr
    assert set(ids) <= set(gc.stdout.split()), gc.stdout
    workspaces = home / "env" / BACKEND
    assert not workspaces.exists() or list(workspaces.iterdir()) == []
    assert _processes_with(["sleep", token]) == []
    assert orchard("env", "gc").stdout.startswith("reaped 0")


@needs_backend
def test_down_destroys_the_services_sandboxes(_orchard_home, down_at_end):
    home = _orchard_home
    assert orchard("env", "up", "-d", "-b", BACKEND, "--port", "0").returncode == 0
    state = _service_json(home)
    client = EnvClient(state["url"])
    sid = client.create_sandbox(SandboxSpec(memory="256Mi")).sandbox_id
    down = orchard("env", "down", "--format", "json")
    assert down.returncode == 0, down.stderr
    answer = json.loads(down.stdout)
    assert answer["stopped"] is True and answer["how"] == "stopped" and answer["reaped"] == []
    assert not owner_alive(state["owner"])
    assert not (home / "env" / "service.json").exists()
    assert not (home / "env" / BACKEND / sid).exists()
    assert orchard("env", "status").returncode == 3


@needs_backend
def test_foreground_service_stops_on_sigterm(_orchard_home):
    script = Path(sys.executable).with_name("orchard")
    proc = subprocess.Popen([str(script), "env", "up", "-b", BACKEND, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        deadline = time.monotonic() + 30
        while not line.startswith("export ORCHARD_ENV_URL="):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            line = proc.stdout.readline()
        url = line.strip().split("=", 1)[1]
        # The socket listens before the line is printed: the request waits for uvicorn.
        sid = EnvClient(url).create_sandbox(SandboxSpec(memory="256Mi")).sandbox_id
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (_orchard_home / "env" / BACKEND / sid).exists()
    assert not (_orchard_home / "env" / "service.json").exists()


def test_smoke_in_process_reports_failure_with_exit_3_for_a_broken_backend(monkeypatch):
    """In-process smoke over a backend whose engine is unreachable fails loudly, exit 3."""
    result = orchard("env", "smoke", "--backend", "docker",
                     env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 3, result
    assert "error:" in result.stderr


@needs_backend
def test_down_kills_a_service_that_ignores_sigterm(_orchard_home):
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
                                 "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout.readline() == "ready\n"
        owner = f"{socket.gethostname()}:{stubborn.pid}:{process_start_time(stubborn.pid)}"
        _write_state(ServiceState(pid=stubborn.pid, owner=owner, url="http://127.0.0.1:9", backend=BACKEND,
                                  host="127.0.0.1", port=9, started_at=time.time(), key="k"))
        down = orchard("env", "down", "--timeout", "1", "--format", "json")
        assert down.returncode == 0, down.stderr
        assert json.loads(down.stdout)["how"] == "killed"
        assert stubborn.wait(10) == -signal.SIGKILL
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
