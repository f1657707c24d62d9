"""The Orchard Env HTTP service and EnvClient, against a real uvicorn server on loopback.

The backend is the local one (bubblewrap) unless ORCHARD_TEST_BACKEND names another (for
example `docker`), so the same tests exercise the service over any backend.
"""

from __future__ import annotations

import base64
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from env_service import _start, _stop

from orchard_cli.env.auth import client_key, key_path, service_key
from orchard_cli.env.client import EnvClient
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import ExecRequest, SandboxSpec
from orchard_cli.errors import AuthError, InfraError, NotFoundError, PathEscapeError

BACKEND = os.environ.get("ORCHARD_TEST_BACKEND", "local")
needs_backend = {"local": pytest.mark.bwrap, "docker": pytest.mark.docker,
                 "kubernetes": pytest.mark.k8s}.get(BACKEND, lambda test: test)


@pytest.fixture
def service():
    svc = _start(EnvManager(BACKEND))
    yield svc
    _stop(svc)


# ---- auth ------------------------------------------------------------------------------------

PROTECTED = [
    ("GET", "/sandboxes", None),
    ("POST", "/sandboxes", {}),
    ("POST", "/sandboxes/sb-x/exec", {"command": "id", "wait": True}),
    ("PUT", "/sandboxes/sb-x/files", {"path": "a", "content": "b"}),
    ("GET", "/sandboxes/sb-x/files?path=a", None),
    ("POST", "/gc", None),
    ("GET", "/jobs/job-x", None),
]


@pytest.mark.parametrize("method,path,body", PROTECTED)
def test_no_key_or_wrong_key_is_401(service, method, path, body):
    for key in (None, "not-the-key", service.key + "x"):
        with service.http(key) as http:
            response = http.request(method, path, json=body)
        assert response.status_code == 401, (key, response.text)
        answer = response.json()
        assert answer["error"] == "AuthError"
        assert answer["detail"] in ("missing API key", "wrong API key")
    assert service.manager.list_sandboxes() == []


def test_health_needs_no_key_and_bearer_is_accepted(service):
    with service.http() as http:
        health = http.get("/health").json()
        assert health == {"status": "ok", "backend": service.manager.backend.name,
                          "version": health["version"], "sandboxes": 0}
        bearer = http.get("/sandboxes", headers={"Authorization": f"Bearer {service.key}"})
        assert bearer.status_code == 200 and bearer.json() == []
        wrong = http.get("/sandboxes", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401


def test_client_with_wrong_key_raises_auth_error(service):
    with pytest.raises(AuthError) as info:
        service.client("wrong").list_sandboxes()
    assert "ORCHARD_ENV_KEY" in info.value.hint


def test_key_file_is_private_and_shared_with_the_client():
    key = service_key()
    path = key_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == key and len(key) >= 32
    assert service_key() == key and client_key() == key
    path.chmod(0o644)
    with pytest.raises(InfraError, match="readable by others"):
        service_key()


def test_env_key_wins_and_writes_no_file(monkeypatch):
    monkeypatch.setenv("ORCHARD_ENV_KEY", "k" * 40)
    assert service_key() == "k" * 40 == client_key()
    assert not key_path().exists()


# ---- errors ----------------------------------------------------------------------------------

def test_malformed_bodies_are_422_with_a_reason(service):
    with service.http(service.key) as http:
        bad_memory = http.post("/sandboxes", json={"memory": "lots"})
        extra = http.post("/sandboxes", json={"imagee": "host"})
        not_json = http.post("/sandboxes", content=b"{nope", headers={"content-type": "application/json"})
        empty_cmd = http.post("/sandboxes/sb-x/exec", json={"command": ""})
        timeouts = [http.post("/sandboxes/sb-x/exec", content=b'{"command": "true", "timeout_seconds": %s}' % t,
                              headers={"content-type": "application/json"})
                    for t in (b"1e300", b"Infinity", b"NaN", b"604801", b"0", b"-1")]
    for response, needle in ((bad_memory, "memory"), (extra, "imagee"), (not_json, "JSON"),
                             (empty_cmd, "command"), *((t, "timeout_seconds") for t in timeouts)):
        assert response.status_code == 422, response.text
        body = response.json()
        assert body["error"] == "UsageError" and needle in body["detail"], body
        assert "\n" not in body["detail"]
    assert service.manager.list_sandboxes() == []


def test_unknown_ids_are_404(service):
    client = service.client()
    for call in (lambda: client.get_sandbox("sb-nope"), lambda: client.delete_sandbox("sb-nope"),
                 lambda: client.exec("sb-nope", ExecRequest(command="true")),
                 lambda: client.get_job("job-nope"), lambda: client.wait_job("job-nope", 1),
                 lambda: client.read_file("sb-nope", "a.txt")):
        with pytest.raises(NotFoundError):
            call()
    with service.http(service.key) as http:
        response = http.get("/sandboxes/sb-nope")
        assert response.status_code == 404
        assert response.json() == {"detail": "no sandbox 'sb-nope'",
                                   "hint": "list them with `orchard env ls`", "error": "NotFoundError"}
        assert http.get("/no/such/route").status_code == 404


def test_unreachable_service_is_infra_error_naming_env_up():
    with socket_closed_port() as port:
        client = EnvClient(f"http://127.0.0.1:{port}", key="k")
        with pytest.raises(InfraError) as info:
            client.list_sandboxes()
    assert "orchard env up" in info.value.hint


class socket_closed_port:
    """A loopback port with nothing listening on it."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        pass


# ---- the whole API through EnvClient -----------------------------------------------------------

PATCH = """\
--- a/hello.txt
+++ b/hello.txt
@@ -1 +1 @@
-hello
+hello world
"""


@needs_backend
def test_round_trip_through_the_client(service):
    client = service.client()
    info = client.create_sandbox(SandboxSpec(memory="512Mi", timeout=600), wait=False)
    assert info.status == "pending"
    info = client.wait_sandbox(info.sandbox_id, timeout=120)
    assert info.status == "ready", info.error
    sid = info.sandbox_id
    assert [s.sandbox_id for s in client.list_sandboxes()] == [sid]

    job = client.exec(sid, ExecRequest(command="echo out; echo err >&2; exit 3", wait=True))
    assert (job.status, job.exit_code, job.stdout, job.stderr) == ("failed", 3, "out\n", "err\n")

    queued = client.exec(sid, ExecRequest(command=["sh", "-c", "sleep 0.5; pwd"]))
    assert queued.status in ("queued", "running") and queued.stdout == ""
    done = client.wait_job(queued.job_id, timeout=60)
    assert done.ok and done.stdout.strip() == info.spec.workdir
    assert client.get_job(queued.job_id).ok

    blob = bytes(range(256)) * 4
    assert client.write_file(sid, "data/blob.bin", blob) == f"{info.spec.workdir}/data/blob.bin"
    assert client.read_file(sid, "data/blob.bin") == blob
    assert client.read_file(sid, f"{info.spec.workdir}/data/blob.bin") == blob
    seen = client.exec(sid, ExecRequest(command="wc -c < data/blob.bin", wait=True))
    assert seen.stdout.strip() == "1024"
    for bad in ("../../etc/passwd", "/etc/passwd", "data/../../x"):
        with pytest.raises(PathEscapeError):
            client.read_file(sid, bad)
        with pytest.raises(PathEscapeError):
            client.write_file(sid, bad, b"x")
    with service.http(service.key) as http:
        escape = http.get(f"/sandboxes/{sid}/files", params={"path": "../../etc/passwd"})
    assert escape.status_code == 403 and "outside the sandbox workspace" in escape.json()["detail"]
    with pytest.raises(NotFoundError):
        client.read_file(sid, "missing.txt")

    client.write_file(sid, "hello.txt", b"hello\n")
    result = client.apply_patch(sid, PATCH)
    assert result.applied and result.method, result.output
    assert client.read_file(sid, "hello.txt") == b"hello world\n"
    stale = PATCH.replace("-hello\n", "-absent\n").replace("+hello world\n", "+other\n")
    assert not client.apply_patch(sid, stale).applied
    assert client.read_file(sid, "hello.txt") == b"hello world\n"

    before = client.get_sandbox(sid).last_heartbeat
    time.sleep(0.05)
    assert client.heartbeat(sid).last_heartbeat > before

    assert client.delete_sandbox(sid).status == "stopped"
    with pytest.raises(NotFoundError):
        client.get_sandbox(sid)
    assert sid not in {r.sandbox_id for r in service.manager.backend.resources()}
    client.close()


@needs_backend
def test_base64_and_utf8_file_bodies(service):
    client = service.client()
    sid = client.create_sandbox(SandboxSpec(memory="256Mi")).sandbox_id
    with service.http(service.key) as http:
        put = http.put(f"/sandboxes/{sid}/files", json={"path": "t.txt", "content": "é\n"})
        assert put.status_code == 200 and put.json()["bytes"] == 3
        got = http.get(f"/sandboxes/{sid}/files", params={"path": "t.txt"}).json()
        assert got["encoding"] == "base64" and base64.b64decode(got["content"]) == "é\n".encode()
        bad = http.put(f"/sandboxes/{sid}/files",
                       json={"path": "b", "content": "@@@", "encoding": "base64"})
        assert bad.status_code == 400 and "base64" in bad.json()["detail"]
    client.close()
    assert service.manager.list_sandboxes() == []


@needs_backend
def test_shutdown_destroys_the_sandboxes(tmp_path):
    svc = _start(EnvManager(BACKEND))
    client = svc.client()
    ids = {client.create_sandbox(SandboxSpec(memory="256Mi")).sandbox_id for _ in range(2)}
    assert ids <= {r.sandbox_id for r in svc.manager.backend.resources()}
    _stop(svc)
    assert not ids & {r.sandbox_id for r in svc.manager.backend.resources()}


@needs_backend
def test_many_concurrent_waits_do_not_block_the_service(service):
    client = service.client()
    sid = client.create_sandbox(SandboxSpec(memory="256Mi")).sandbox_id
    job = client.exec(sid, ExecRequest(command="until [ -e go ]; do sleep 0.05; done; echo done",
                                       timeout_seconds=30))
    waiters = 80  # twice anyio's default thread limit
    shared = service.client()
    with ThreadPoolExecutor(waiters) as pool:
        futures = [pool.submit(shared.wait_job, job.job_id, 60) for _ in range(waiters)]
        time.sleep(1.5)  # every waiter is now blocked in the service
        assert not any(f.done() for f in futures)
        started = time.perf_counter()
        quick = client.exec(sid, ExecRequest(command="echo alive", wait=True))
        assert quick.stdout == "alive\n"
        assert time.perf_counter() - started < 2.0
        client.write_file(sid, "go", b"")
        results = [f.result() for f in futures]
    assert all(r.ok and r.stdout == "done\n" for r in results)
    client.close()


@needs_backend
def test_a_hog_in_one_sandbox_does_not_stall_another(service):
    client = service.client()
    hog = client.create_sandbox(SandboxSpec(memory="128Mi", pids=32, cpu=0.5)).sandbox_id
    calm = client.create_sandbox(SandboxSpec(memory="256Mi")).sandbox_id
    memory = client.exec(hog, ExecRequest(
        command=["python3", "-c", "b = bytearray(768 << 20); print(len(b))"], timeout_seconds=30))
    # The spinner starts before the forks fill the pids limit: started after them, on a loaded
    # machine it could not fork at all ("Resource temporarily unavailable") and never time out.
    spin = client.exec(hog, ExecRequest(command="while :; do :; done", timeout_seconds=6))
    forks = client.exec(hog, ExecRequest(
        command="for i in $(seq 200); do sleep 5 & done 2>/dev/null; wait", timeout_seconds=20))
    latencies = []
    for _ in range(5):
        started = time.perf_counter()
        answer = client.exec(calm, ExecRequest(command="echo alive", wait=True, timeout_seconds=30))
        latencies.append(time.perf_counter() - started)
        assert answer.ok and answer.stdout == "alive\n"
        time.sleep(0.3)
    assert max(latencies) < 3.0, latencies
    memory_job = client.wait_job(memory.job_id, 60)
    assert client.wait_job(spin.job_id, 60).timed_out
    assert client.wait_job(forks.job_id, 60).finished
    if client.get_sandbox(hog).limits.startswith("cgroup"):
        assert not memory_job.ok, "768 MiB fit in a 128 MiB sandbox"
    client.close()


def test_gc_endpoint_answers_a_list(service):
    with service.http(service.key) as http:
        answer = http.post("/gc")
    assert answer.status_code == 200 and isinstance(answer.json()["reaped"], list)
