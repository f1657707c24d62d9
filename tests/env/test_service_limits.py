"""Numbers and sizes the service cannot honour are the caller's to fix, answered before anything is
made or read: 422 for pids, cpu or memory beyond what the backend (for local: the kernel) allows,
413 for a request body over the cap (by its Content-Length, or counted as it streams)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from env_service import _start, _stop

from orchard_cli.env.body_limit import MAX_BODY_BYTES
from orchard_cli.env.manager import EnvManager

BACKEND = os.environ.get("ORCHARD_TEST_BACKEND", "local")


@pytest.fixture
def service():
    svc = _start(EnvManager(BACKEND))
    yield svc
    _stop(svc)


def _pid_max() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text())


@pytest.mark.bwrap
def test_numbers_the_backend_cannot_honour_are_422_before_anything_is_made(service):
    cases = [({"pids": 100_000_000}, "pids"), ({"cpu": 1e300}, "cpu"), ({"cpu": "Infinity"}, "cpu"),
             ({"cpu": "1e300m"}, "cpu"), ({"memory": "2Ei"}, "memory"), ({"memory": 1 << 62}, "memory")]
    if BACKEND == "local" and _pid_max() < 4_194_304:
        cases.append(({"pids": _pid_max() + 1}, "pid_max"))
    before = set(os.listdir(service.manager.backend.root)) if BACKEND == "local" else set()
    with service.http(service.key) as http:
        for body, needle in cases:
            for wait in ("false", "true"):
                reply = http.post(f"/sandboxes?wait={wait}", json=body)
                assert reply.status_code == 422, (body, reply.status_code, reply.text)
                assert needle in reply.json()["detail"] and "\n" not in reply.json()["detail"], reply.text
                assert "Retry-After" not in reply.headers
    assert service.manager.list_sandboxes() == []
    if BACKEND == "local":
        assert set(os.listdir(service.manager.backend.root)) == before  # no folder, so no cgroup either
        assert service.manager.backend.resources() == []


def _raw(service, head: bytes, body_chunks=()) -> tuple[bytes, int]:
    """(the answer, body bytes sent before it came) over a plain socket: before each chunk, an
    answer already there is read and the sending stops."""
    import select

    host, port = service.url.removeprefix("http://").split(":")
    sent = 0
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head)
        for chunk in body_chunks:
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(chunk)
            except OSError:  # the server stopped reading and closed
                break
            sent += len(chunk)
        return _rest(sock, b""), sent


def _rest(sock: socket.socket, got: bytes) -> bytes:
    """The whole (short) answer: its head and the body its Content-Length announces."""
    def complete() -> bool:
        head, _, body = got.partition(b"\r\n\r\n")
        length = [int(line.split(b":")[1]) for line in head.lower().splitlines() if line.startswith(b"content-length:")]
        return bool(_) and bool(length) and len(body) >= length[0]

    while len(got) < 65536 and not complete():
        try:
            more = sock.recv(4096)
        except OSError:
            break
        if not more:
            break
        got += more
    return got


def test_a_body_over_the_cap_is_413_before_it_is_read(service):
    started = time.monotonic()
    answer, _ = _raw(service, (f"PUT /sandboxes/sb-x/files HTTP/1.1\r\nHost: h\r\nX-API-Key: {service.key}\r\n"
                               f"Content-Type: application/json\r\nContent-Length: {300 * 1024 * 1024}\r\n\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 413") and b"over the service's limit" in answer, answer[:300]
    assert time.monotonic() - started < 10  # answered on the headers: not one of the 300 MB was sent
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b"a" * (1 << 20))
    answer, sent = _raw(service, (f"PUT /sandboxes/sb-x/files HTTP/1.1\r\nHost: h\r\nX-API-Key: {service.key}\r\n"
                                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode(),
                        (chunk for _ in range(300)))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert sent < MAX_BODY_BYTES + (16 << 20)  # refused once past the cap, not at the end of 300 MB
    stranger, _ = _raw(service, (f"PUT /sandboxes/sb-x/files HTTP/1.1\r\nHost: h\r\n"
                                 f"Content-Length: {300 * 1024 * 1024}\r\n\r\n").encode())
    assert stranger.startswith(b"HTTP/1.1 401")  # the key is checked first
