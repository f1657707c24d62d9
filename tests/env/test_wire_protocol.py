"""The published Orchard Env wire protocol, spoken raw (httpx, websockets) as Microsoft's
`orchard_env` SDK speaks it, against a real service on the local and docker backends.

Field names, status words and codes here are the published API's; a change that breaks them
breaks every SDK user, so each is asserted as the SDK reads it.
"""

from __future__ import annotations

import base64
import json
import threading
import time

import httpx
import pytest

from orchard_cli.env.manager import EnvManager
from env_service import _start, _stop

BACKENDS = [pytest.param("local", marks=pytest.mark.bwrap), pytest.param("docker", marks=pytest.mark.docker)]


class Gate:
    """Holds the backend's sandbox creation until opened: a real backend, only slower."""

    def __init__(self, manager: EnvManager) -> None:
        self.opened = threading.Event()
        self.opened.set()
        create = manager.backend.create

        def held(*args, **kwargs):
            assert self.opened.wait(120), "the gate was never opened"
            return create(*args, **kwargs)

        manager.backend.create = held


@pytest.fixture(scope="module", params=BACKENDS)
def service(request):
    svc = _start(EnvManager(request.param))
    svc.gate = Gate(svc.manager)
    svc.image = "host" if request.param == "local" else _docker_image()
    yield svc
    _stop(svc)


def _docker_image() -> str:
    from orchard_cli.env.images import ensure_base_image

    return ensure_base_image()


@pytest.fixture
def http(service):
    with httpx.Client(base_url=service.url, headers={"X-API-Key": service.key}, timeout=120) as client:
        yield client


def _sandbox(http, service, **fields) -> str:
    body = {"image": service.image, "block_network": True, **fields}
    sid = http.post("/sandboxes", json=body).json()["sandbox_id"]
    assert http.get(f"/sandboxes/{sid}/wait", params={"timeout": 300}).json()["ready"] is True
    return sid


@pytest.fixture
def sid(http, service):
    sid = _sandbox(http, service)
    yield sid
    http.delete(f"/sandboxes/{sid}")


# ---- sandboxes -------------------------------------------------------------------------------

def test_create_with_a_client_id_cpu_quantity_and_nulls(http, service):
    body = {"image": service.image, "block_network": True, "sandbox_id": "wire-3f9a1c2e", "cpu": "1500m",
            "memory": "1Gi", "timeout": 600}
    created = http.post("/sandboxes", json=body)
    assert created.status_code == 200 and created.headers["content-type"] == "application/json"
    first = created.json()
    assert first["sandbox_id"] == "wire-3f9a1c2e" and first["status"] in ("pending", "ready")
    assert first["timeout"] == 600 and isinstance(first["timeout"], int)
    # a retried POST (the SDK retries cut-off requests) gives the same sandbox, not a second one
    assert http.post("/sandboxes", json=body).json()["sandbox_id"] == "wire-3f9a1c2e"
    ready = http.get("/sandboxes/wire-3f9a1c2e/wait", params={"timeout": 600}).json()
    assert ready["ready"] is True and ready["status"] == "ready" and ready["status_message"] == ""
    assert (ready["cpu"], ready["memory"], ready["image"], ready["block_network"]) == \
        ("1.5", "1Gi", service.image, True)
    assert isinstance(ready["namespace"], str)
    # the published API's containers have a writable root; the local backend's images stay read-only
    writable = service.manager.backend.name != "local"
    assert ready["details"]["root"] == ("writable" if writable else "read-only")
    probe = http.post("/sandboxes/wire-3f9a1c2e/exec", json={"command": "echo x > /etc/probe", "wait": True})
    assert (probe.json()["exit_code"] == 0) == writable
    assert http.get("/sandboxes/wire-3f9a1c2e").json()["status"] == "ready"
    nulls = http.post("/sandboxes", json={"image": service.image, "sandbox_id": None, "cpu": None,
                                          "memory": None, "timeout": None, "block_network": None})
    assert nulls.status_code == 200, nulls.text
    other = nulls.json()["sandbox_id"]
    assert http.get(f"/sandboxes/{other}/wait", params={"timeout": 300}).json()["timeout"] == 3600
    for sandbox_id in ("wire-3f9a1c2e", other):
        gone = http.delete(f"/sandboxes/{sandbox_id}")
        assert gone.status_code == 200 and gone.json()["sandbox_id"] == sandbox_id
    # DELETE is idempotent: the SDK's `with sandbox:` deletes what atexit may delete again
    again = http.delete("/sandboxes/wire-3f9a1c2e")
    assert again.status_code == 200 and again.json()["status"] == "deleted"
    assert http.get("/sandboxes/wire-3f9a1c2e").status_code == 404
    assert http.post("/sandboxes", json={"image": service.image, "sandbox_id": "no/slash"}).status_code == 422


def test_an_image_the_backend_cannot_run_fails_with_a_message_naming_it(http, service):
    sid = http.post("/sandboxes", json={"image": "orchard-test/absent-image:404"}).json()["sandbox_id"]
    info = http.get(f"/sandboxes/{sid}/wait", params={"timeout": 300}).json()
    assert (info["status"], info["ready"]) == ("failed", False)
    assert "orchard-test/absent-image:404" in info["status_message"], info["status_message"]
    http.delete(f"/sandboxes/{sid}")


def test_wait_answers_408_while_pending_then_the_sandbox(http, service):
    service.gate.opened.clear()
    try:
        sid = http.post("/sandboxes", json={"image": service.image}).json()["sandbox_id"]
        early = http.get(f"/sandboxes/{sid}/wait", params={"timeout": 0.5})
        assert early.status_code == 408 and "did not become ready" in early.json()["detail"]
        assert http.get(f"/sandboxes/{sid}").json()["status"] == "pending"
    finally:
        service.gate.opened.set()
    assert http.get(f"/sandboxes/{sid}/wait", params={"timeout": 300}).json()["status"] == "ready"
    http.delete(f"/sandboxes/{sid}")


def test_past_max_pending_creates_get_503_with_retry_after(http, service):
    from orchard_cli.env.client import EnvClient
    from orchard_cli.env.models import SandboxSpec

    limit = service.server.config.app.state.max_pending
    service.server.config.app.state.max_pending = 1
    service.gate.opened.clear()
    try:
        first = http.post("/sandboxes", json={"image": service.image}).json()["sandbox_id"]
        refused = http.post("/sandboxes", json={"image": service.image})
        assert refused.status_code == 503 and float(refused.headers["Retry-After"]) > 0
        assert "detail" in refused.json()
        # orchard's own client waits a 503 out, as the SDK does
        threading.Timer(1.5, service.gate.opened.set).start()
        client = EnvClient(service.url, key=service.key)
        info = client.create_sandbox(SandboxSpec(image=service.image))
        assert info.status == "ready"
        client.delete_sandbox(info.sandbox_id)
        client.close()
    finally:
        service.gate.opened.set()
        service.server.config.app.state.max_pending = limit
    http.delete(f"/sandboxes/{first}")


def test_heartbeat_and_unknown_ids(http, sid):
    beat = http.post(f"/sandboxes/{sid}/heartbeat")
    assert beat.status_code == 200 and beat.json()["sandbox_id"] == sid
    assert http.get(f"/sandboxes/{sid}").json()["heartbeats"] == 1
    assert http.post("/sandboxes/nope/heartbeat").status_code == 404
    assert http.post("/sandboxes/nope/exec", json={"command": "true"}).status_code == 404
    assert http.get("/jobs/nope").status_code == 404


# ---- exec ------------------------------------------------------------------------------------

def test_exec_as_the_sdk_sends_it(http, sid):
    """All keys present, nulls explicit, wait true: the full job object, published status words."""
    body = {"command": "echo out; echo err >&2; mkdir -p d/{a,b}; ls d | tr '\\n' ,; exit 3",
            "timeout_seconds": None, "cwd": None, "env": None, "login_shell": False, "wait": True}
    job = http.post(f"/sandboxes/{sid}/exec", json=body).json()
    assert job["status"] == "failed" and job["exit_code"] == 3
    assert job["stdout"] == "out\na,b," and job["stderr"] == "err\n"
    for key in ("job_id", "sandbox_id", "command", "created_at", "started_at", "completed_at"):
        assert job[key] is not None, key
    assert job["completed_at"] >= job["started_at"] >= job["created_at"] - 1
    ok = http.post(f"/sandboxes/{sid}/exec", json={**body, "command": ["echo", "a", "b"]}).json()
    assert (ok["status"], ok["stdout"], ok["error"]) == ("succeeded", "a b\n", None)
    env = http.post(f"/sandboxes/{sid}/exec", json={**body, "command": "echo $GREETING; pwd", "cwd": "/tmp",
                                                    "env": {"GREETING": "hi"}}).json()
    assert env["stdout"] == "hi\n/tmp\n"


def test_exec_without_wait_is_queued_then_polled(http, sid):
    started = http.post(f"/sandboxes/{sid}/exec", json={"command": "sleep 0.5; echo done"})
    assert set(started.json()) >= {"job_id", "status"} and started.json()["status"] in ("queued", "running")
    job_id = started.json()["job_id"]
    deadline = time.monotonic() + 120
    while (job := http.get(f"/jobs/{job_id}").json())["status"] not in ("succeeded", "failed"):
        assert job["status"] in ("queued", "running")
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert (job["status"], job["stdout"], job["exit_code"]) == ("succeeded", "done\n", 0)
    waited = http.get(f"/jobs/{job_id}/wait", params={"timeout": 5}).json()
    assert waited["status"] == "succeeded"


def test_a_timed_out_job_is_failed_with_124(http, sid):
    job = http.post(f"/sandboxes/{sid}/exec", json={"command": "echo before; sleep 30", "timeout_seconds": 1,
                                                    "wait": True}).json()
    assert (job["status"], job["exit_code"], job["timed_out"]) == ("failed", 124, True)
    assert job["stdout"] == "before\n" and "timed out" in job["error"]


def test_login_shell_reads_bashrc(http, sid):
    http.post(f"/sandboxes/{sid}/files", json={"path": "/tmp/home/.bashrc", "content":
                                                base64.b64encode(b"export FROM_RC=yes\n").decode()})
    body = {"command": "echo ${FROM_RC:-no}", "env": {"HOME": "/tmp/home"}, "wait": True}
    assert http.post(f"/sandboxes/{sid}/exec", json={**body, "login_shell": True}).json()["stdout"] == "yes\n"
    plain = http.post(f"/sandboxes/{sid}/exec", json={**body, "login_shell": False}).json()
    assert plain["stdout"] == "no\n"


# ---- files and patches -----------------------------------------------------------------------

def test_upload_download_and_list(http, sid):
    data = bytes(range(256)) * 4
    up = http.post(f"/sandboxes/{sid}/files", json={"path": "/workspace/sub/blob.bin",
                                                    "content": base64.b64encode(data).decode()})
    assert up.status_code == 200 and up.json()["success"] is True and up.json()["size"] == len(data)
    down = http.get(f"/sandboxes/{sid}/files", params={"path": "/workspace/sub/blob.bin"}).json()
    assert base64.b64decode(down["content"]) == data and down["size"] == len(data)
    listing = http.get(f"/sandboxes/{sid}/files/list", params={"path": "/workspace"}).json()
    assert listing["path"] == "/workspace"
    entries = {e["name"]: e for e in listing["files"]}
    assert entries["sub"]["type"] == "directory"
    inner = http.get(f"/sandboxes/{sid}/files/list", params={"path": "/workspace/sub"}).json()["files"]
    assert [(e["name"], e["type"], e["size"]) for e in inner] == [("blob.bin", "file", len(data))]
    assert http.get(f"/sandboxes/{sid}/files", params={"path": "/workspace/none"}).status_code == 404
    bad = http.post(f"/sandboxes/{sid}/files", json={"path": "/workspace/x", "content": "%%%"})
    assert bad.status_code == 422 or bad.status_code == 400


def test_apply_patch_published_fields(http, sid):
    http.post(f"/sandboxes/{sid}/exec", json={"command": "printf 'one\\ntwo\\n' > f.txt", "wait": True})
    patch = "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+three\n"
    done = http.post(f"/sandboxes/{sid}/apply_patch", json={"patch": patch, "cwd": "/workspace",
                                                             "timeout_seconds": 60}).json()
    assert (done["success"], done["exit_code"], done["error"]) == (True, 0, None)
    assert isinstance(done["stdout"], str) and isinstance(done["stderr"], str)
    again = http.post(f"/sandboxes/{sid}/apply_patch", json={"patch": patch}).json()
    assert again["success"] is False and again["exit_code"] != 0 and again["error"]
    out = http.post(f"/sandboxes/{sid}/exec", json={"command": "cat f.txt", "wait": True}).json()["stdout"]
    assert out == "one\nthree\n"


# ---- PTY -------------------------------------------------------------------------------------

def _ws(service, sid: str, key: str | None = None):
    from websockets.sync.client import connect

    url = service.url.replace("http://", "ws://") + f"/sandboxes/{sid}/exec/pty?api_key={key or service.key}"
    return connect(url, open_timeout=60, close_timeout=10)


def _frames_until_exit(ws) -> tuple[bytes, int]:
    out = b""
    while True:
        frame = json.loads(ws.recv(timeout=60))
        if frame["type"] == "stdout":
            out += base64.b64decode(frame["data"])
        elif frame["type"] == "exit":
            return out, frame["code"]
        else:
            raise AssertionError(frame)


def _send(ws, **frame) -> None:
    ws.send(json.dumps(frame))


def _stdin(ws, data: bytes) -> None:
    _send(ws, type="stdin", data=base64.b64encode(data).decode())


def test_pty_is_a_terminal_with_a_size_echo_and_an_exit_code(service, sid):
    with _ws(service, sid) as ws:
        _send(ws, type="init", cmd=["bash", "-c", "tty -s && stty size; read line; echo got:$line; exit 7"],
              env={}, cwd=None, rows=30, cols=100, login_shell=False)
        ready = json.loads(ws.recv(timeout=60))
        assert ready["type"] == "ready" and isinstance(ready["pid"], int)
        _stdin(ws, b"ping\n")
        out, code = _frames_until_exit(ws)
    assert code == 7
    text = out.decode()
    assert "30 100\r\n" in text and "ping\r\n" in text and "got:ping\r\n" in text, text


def test_pty_resize_and_signals(service, sid):
    with _ws(service, sid) as ws:
        _send(ws, type="init", cmd=["bash", "-c", "trap 'stty size; exit 0' WINCH; echo up; "
                                                  "while :; do sleep 0.1; done"], env={})
        assert json.loads(ws.recv(timeout=60))["type"] == "ready"
        assert b"up" in base64.b64decode(json.loads(ws.recv(timeout=60))["data"])
        _send(ws, type="resize", rows=50, cols=132)
        out, code = _frames_until_exit(ws)
    assert b"50 132" in out and code == 0
    with _ws(service, sid) as ws:
        _send(ws, type="init", cmd=["sleep", "600"], env={})
        assert json.loads(ws.recv(timeout=60))["type"] == "ready"
        _send(ws, type="signal", sig="KILL")
        assert _frames_until_exit(ws)[1] == -9


def test_pty_command_not_found_and_a_client_that_leaves(service, sid, http):
    with _ws(service, sid) as ws:
        _send(ws, type="init", cmd=["no-such-program-xyz"], env={})
        assert json.loads(ws.recv(timeout=60))["type"] == "ready"
        out, code = _frames_until_exit(ws)
    assert code == 127 and b"no-such-program-xyz" in out
    with _ws(service, sid) as ws:
        _send(ws, type="init", cmd=["sleep", "777.123"], env={})
        assert json.loads(ws.recv(timeout=60))["type"] == "ready"
    # the client went away: its process goes too
    check = {"command": "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done 2>/dev/null"
                        " | grep -c '^sleep 777'", "wait": True}
    deadline = time.monotonic() + 30
    while http.post(f"/sandboxes/{sid}/exec", json=check).json()["stdout"].strip() != "0":
        assert time.monotonic() < deadline, "the terminal's process outlived its client"
        time.sleep(0.2)


def _count(http, sid: str, pattern: str) -> int:
    check = {"command": "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done 2>/dev/null"
                        f" | grep -c '^{pattern}'", "wait": True}
    return int(http.post(f"/sandboxes/{sid}/exec", json=check).json()["stdout"].strip() or 0)


def test_pty_leftovers_die_as_execs_do_even_ones_that_left_the_session(service, sid, http):
    """What a terminal's command started (`setsid` ones, one with its environment cleared too)
    dies when the command exits, and when the client goes away."""
    with _ws(service, sid) as ws:
        _send(ws, type="init", cmd=["bash", "-c", "setsid sleep 881.5 & setsid env -i /bin/sleep 881.6 & "
                                                  "sleep 0.3; exit 3"], env={})
        assert json.loads(ws.recv(timeout=60))["type"] == "ready"
        assert _frames_until_exit(ws)[1] == 3
    assert _count(http, sid, "sleep 881") == 0 and _count(http, sid, "/bin/sleep 881") == 0
    with _ws(service, sid) as ws:
        _send(ws, type="init", cmd=["bash", "-c", "setsid sleep 882.5 & setsid env -i /bin/sleep 882.6 & "
                                                  "sleep 600"], env={})
        assert json.loads(ws.recv(timeout=60))["type"] == "ready"
        deadline = time.monotonic() + 30
        while _count(http, sid, "sleep 882") + _count(http, sid, "/bin/sleep 882") < 2:
            assert time.monotonic() < deadline, "the leftovers never started"
            time.sleep(0.1)
    deadline = time.monotonic() + 30  # the client went away
    while _count(http, sid, "sleep 882") + _count(http, sid, "/bin/sleep 882") + _count(http, sid, "sleep 600"):
        assert time.monotonic() < deadline, "a terminal's leftover outlived its client"
        time.sleep(0.2)


def test_an_open_terminal_holds_no_other_commands_pipe(service, sid, http):
    """A terminal's processes (forked from the sandbox's runner) let go of the runner's
    descriptors: with one open, a command given stdin still sees it end, at once."""
    with _ws(service, sid) as ws:
        _send(ws, type="init", cmd=["sleep", "600"], env={})
        assert json.loads(ws.recv(timeout=60))["type"] == "ready"
        for i in range(3):
            job = http.post(f"/sandboxes/{sid}/exec", json={"command": "cat", "stdin": f"in {i}\n", "wait": True,
                                                           "timeout_seconds": 20}).json()
            assert job["stdout"] == f"in {i}\n" and job["exit_code"] == 0 and not job["timed_out"], job


def test_pty_refusals_carry_the_published_codes(service, sid):
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    with pytest.raises((InvalidStatus, ConnectionClosed)) as refused:
        with _ws(service, sid, key="wrong") as ws:
            ws.recv(timeout=30)
    assert _code(refused.value) == 4401  # the code itself, not a bare 403 handshake
    with pytest.raises((InvalidStatus, ConnectionClosed)) as missing:
        with _ws(service, "no-such-sandbox") as ws:
            ws.recv(timeout=30)
    assert _code(missing.value) == 4404
    with _ws(service, sid) as ws:
        _send(ws, type="stdin", data="")
        frame = json.loads(ws.recv(timeout=30))
        assert frame["type"] == "error" and "init" in frame["message"]
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
    assert closed.value.rcvd.code == 4400


def _code(exc) -> int:
    if getattr(exc, "rcvd", None) is not None:
        return exc.rcvd.code
    return exc.response.status_code


# ---- lifetime --------------------------------------------------------------------------------

@pytest.mark.bwrap
def test_the_published_heartbeat_rule(tmp_path):
    """A sandbox that never heartbeats lives to its timeout; one that has heartbeated is reaped
    once it falls silent for the service's heartbeat timeout (published: 180 s; 1 s here)."""
    from orchard_cli.env.models import SandboxSpec

    manager = EnvManager("local", root=str(tmp_path / "local"), heartbeat_timeout=1.0, reap_interval=0.1)
    try:
        quiet = manager.create_sandbox(SandboxSpec()).sandbox_id
        beating = manager.create_sandbox(SandboxSpec()).sandbox_id
        manager.heartbeat(beating)
        deadline = time.monotonic() + 60
        while beating in {s.sandbox_id for s in manager.list_sandboxes()}:
            assert time.monotonic() < deadline, "a silent sandbox that had heartbeated was not reaped"
            time.sleep(0.1)
        time.sleep(1.5)
        assert manager.get_sandbox(quiet).status == "ready"
    finally:
        manager.close()
