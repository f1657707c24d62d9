"""One conformance suite that every sandbox backend runs (local, docker, kubernetes).

Each check is a plain function `check(env, spec_kwargs)`: `env` is an `Env` (an `EnvManager`, or
an `EnvClient` for the service), `spec_kwargs` the extra SandboxSpec fields the backend needs
(`{"image": "orchard/base:bookworm"}` for docker). A check raises AssertionError on failure and
`CheckSkipped` when it cannot run against this kind of env. `NEEDS` maps a check to the capability
(see `base.CAPABILITIES`) it exercises; `skip_reason()` turns a backend's `unsupported` set into an
explicit reason instead of a silent pass. Images need bash, coreutils, git, patch and python3.

The gc check reproduces the backend in a child process as `EnvManager(backend.name,
**backend.options)`; a backend whose state lives somewhere specific exposes `options` for that.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Iterator

from orchard_cli.env.models import (MAX_FILE_BYTES, TIMEOUT_EXIT_CODE, ExecRequest, Job, Mount, SandboxInfo,
                                    SandboxSpec)
from orchard_cli.errors import NotFoundError, PathEscapeError, TooLargeError, UsageError

Check = Callable[..., None]
CHECKS: dict[str, Check] = {}
NEEDS: dict[str, str] = {}


class CheckSkipped(Exception):
    """The check does not apply to this kind of env (the message says why)."""


def check(needs: str | None = None) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        name = fn.__name__.removeprefix("check_")
        CHECKS[name] = fn
        if needs:
            NEEDS[name] = needs
        return fn
    return register


def skip_reason(name: str, unsupported: frozenset[str] | set[str]) -> str | None:
    need = NEEDS.get(name)
    if need and need in unsupported:
        return f"backend lists {need!r} as unsupported"
    return None


# ---- helpers ---------------------------------------------------------------------------------

@contextlib.contextmanager
def sandbox(env, spec_kwargs: dict, /, **fields) -> Iterator[SandboxInfo]:
    info = env.create_sandbox(SandboxSpec(**{**spec_kwargs, **fields}), wait=True)
    try:
        assert info.status == "ready", f"sandbox not ready: {info.status} {info.error}"
        yield info
    finally:
        with contextlib.suppress(NotFoundError):
            env.delete_sandbox(info.sandbox_id)


def run(env, sandbox_id: str, command: str | list[str], /, **fields) -> Job:
    return env.exec(sandbox_id, ExecRequest(command=command, wait=True, **fields))


def ok(env, sandbox_id: str, command: str | list[str], /, **fields) -> str:
    job = run(env, sandbox_id, command, **fields)
    assert job.status == "succeeded" and job.exit_code == 0, \
        f"{command!r}: {job.status} exit={job.exit_code} error={job.error} stderr={job.stderr!r}"
    return job.stdout


class _Handler(http.server.BaseHTTPRequestHandler):
    disable_nagle_algorithm = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = f"{self.server.tag} {self.path}".encode()
        self.server.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def loopback_server(tag: str) -> Iterator[http.server.ThreadingHTTPServer]:
    """A tiny HTTP server on the host's loopback answering '<tag> <path>'."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.tag, server.paths = tag, []
    server.request_queue_size = 64
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _connect(host: str, port: int) -> str:
    """bash: open a TCP connection (no curl or python needed in the image)."""
    return f"timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}' 2>/dev/null"


HTTP_GET = r"""u=${ORCHARD_PROXY_URL#*://}; hp=${u%%/*}; base=; [ "$hp" != "$u" ] && base=/${u#*/}
exec 3<>/dev/tcp/${hp%:*}/${hp##*:} || exit 7
printf 'GET %s/hello HTTP/1.0\r\nHost: %s\r\n\r\n' "$base" "$hp" >&3; cat <&3"""


# ---- checks ----------------------------------------------------------------------------------

@check()
def check_lifecycle(env, spec_kwargs: dict) -> None:
    info = env.create_sandbox(SandboxSpec(**spec_kwargs, labels={"suite": "conformance"}), wait=False)
    try:
        assert info.status in ("pending", "ready"), info.status
        ready = env.wait_sandbox(info.sandbox_id, timeout=300)
        assert ready.status == "ready", f"{ready.status}: {ready.error}"
        assert ready.isolation not in ("", "unknown"), ready.isolation
        assert ready.limits not in ("", "unknown"), ready.limits
        got = env.get_sandbox(info.sandbox_id)
        assert got.sandbox_id == info.sandbox_id and got.spec.labels == {"suite": "conformance"}
        assert info.sandbox_id in [s.sandbox_id for s in env.list_sandboxes()]
        assert env.heartbeat(info.sandbox_id).last_heartbeat >= got.last_heartbeat
    finally:
        env.delete_sandbox(info.sandbox_id)
    assert info.sandbox_id not in [s.sandbox_id for s in env.list_sandboxes()]


@check()
def check_exec(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as info:
        sid = info.sandbox_id
        job = run(env, sid, "echo out; echo err >&2")
        assert (job.status, job.exit_code, job.stdout, job.stderr) == ("succeeded", 0, "out\n", "err\n")
        job = run(env, sid, "exit 3")
        assert (job.status, job.exit_code) == ("failed", 3), job
        assert not job.ok
        assert run(env, sid, ["printf", "%s|", "a b", "c"]).stdout == "a b|c|"
        job = run(env, sid, ["/no/such/program"])
        assert job.status == "failed" and (job.exit_code not in (0, None) or job.did_not_run), job
        assert ok(env, sid, "cat", stdin="from stdin\n") == "from stdin\n"
        assert ok(env, sid, "printf 'caf\\303\\251'") == "café"


@check()
def check_jobs(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as info:
        sid = info.sandbox_id
        start = time.monotonic()
        jobs = [env.exec(sid, ExecRequest(command=f"sleep 1; echo {i}", wait=False)) for i in range(3)]
        assert all(j.status in ("queued", "running") for j in jobs), jobs
        done = [env.wait_job(j.job_id, timeout=60) for j in jobs]
        elapsed = time.monotonic() - start
        assert [d.stdout for d in done] == ["0\n", "1\n", "2\n"], done
        assert all(d.ok and d.finished and d.duration_seconds is not None for d in done)
        assert elapsed < 2.8, f"3 x 'sleep 1' took {elapsed:.1f}s: commands did not run concurrently"
        assert env.get_job(jobs[0].job_id).status == "succeeded"
        try:
            env.get_job("job-does-not-exist")
        except NotFoundError:
            pass
        else:
            raise AssertionError("get_job of an unknown id did not raise NotFoundError")


@check()
def check_cwd_env(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs, env={"SPEC_VAR": "from-spec"}) as info:
        sid, workdir = info.sandbox_id, info.spec.workdir
        assert ok(env, sid, "pwd").strip() == workdir
        ok(env, sid, "mkdir -p sub/deeper")
        assert ok(env, sid, "pwd", cwd=f"{workdir}/sub").strip() == f"{workdir}/sub"
        assert ok(env, sid, "pwd", cwd="sub/deeper").strip() == f"{workdir}/sub/deeper"
        out = ok(env, sid, 'echo "$SPEC_VAR $REQ_VAR"', env={"REQ_VAR": "from-request"})
        assert out == "from-spec from-request\n", out
        assert ok(env, sid, 'echo "${REQ_VAR:-unset}"') == "unset\n", "request env leaked"


@check()
def check_timeout(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as info:
        sid = info.sandbox_id
        start = time.monotonic()
        job = run(env, sid, "sleep 300 & echo $! > /tmp/pids; setsid sleep 301 & echo $! >> /tmp/pids;"
                            " echo started; sleep 302", timeout_seconds=1.5)
        assert time.monotonic() - start < 20, "the timeout did not stop the command"
        assert job.status == "failed" and job.timed_out and job.exit_code == TIMEOUT_EXIT_CODE, job
        assert job.error == "Command timed out after 1.5s", job.error
        assert "started" in job.stdout, job.stdout
        time.sleep(0.3)
        alive = ok(env, sid, "for p in $(cat /tmp/pids); do [ -e /proc/$p ] && "
                             "! grep -q '^State:.*Z' /proc/$p/status && echo $p; done; true")
        assert alive == "", f"children survived the timeout: {alive}"


@check()
def check_timeout_kills_what_left_its_session(env, spec_kwargs: dict) -> None:
    """A timed-out command's children die even when they left its session and its environment
    (`setsid env -i`), which neither its process group nor an environment token can find."""
    with sandbox(env, spec_kwargs) as info:
        sid = info.sandbox_id
        if run(env, sid, "true").leftover_processes is None:
            raise CheckSkipped("this exec path cannot follow processes out of their session")
        job = run(env, sid, "setsid env -i sleep 304 & echo $! > /tmp/esc; sleep 305", timeout_seconds=1.5)
        assert job.timed_out, job
        time.sleep(0.3)
        alive = ok(env, sid, "for p in $(cat /tmp/esc); do [ -e /proc/$p ] && "
                             "! grep -q '^State:.*Z' /proc/$p/status && echo $p; done; true")
        assert alive == "", f"an escaped child survived the timeout: {alive}"


@check()
def check_leftovers(env, spec_kwargs: dict) -> None:
    """A command that leaves processes running (even ones that left its session and environment)
    is reported with how many, and they are killed."""
    with sandbox(env, spec_kwargs) as info:
        sid = info.sandbox_id
        job = run(env, sid, "sleep 310 & echo $! > /tmp/left; setsid env -i sleep 311 & echo $! >> /tmp/left;"
                            " echo done")
        assert job.ok and job.stdout == "done\n", job
        if job.leftover_processes is None:
            raise CheckSkipped("this exec path cannot tell what a command left running")
        assert job.leftover_processes == 2, job
        alive = ok(env, sid, "for p in $(cat /tmp/left); do [ -e /proc/$p ] && "
                             "! grep -q '^State:.*Z' /proc/$p/status && echo $p; done; true")
        assert alive == "", f"leftovers survived: {alive}"
        quiet = run(env, sid, "(sleep 0.1; echo late) & echo early")
        assert quiet.ok and quiet.leftover_processes == 0 and quiet.stdout == "early\nlate\n", quiet
        kept = run(env, sid, "sleep 312 & echo $! > /tmp/kept", keep_background=True)
        assert kept.ok and kept.leftover_processes == 1, kept
        assert ok(env, sid, "kill -0 $(cat /tmp/kept) && echo alive") == "alive\n", "keep_background killed it"


@check(needs="memory_limit")
def check_out_of_memory(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs, memory="64Mi") as info:
        job = run(env, info.sandbox_id, "python3 -c 'x = bytearray(512 << 20)'")
        assert job.status == "failed" and job.exit_code == 137 and job.oom_killed, job
        assert not run(env, info.sandbox_id, "true").oom_killed


@check()
def check_truncation(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as info:
        sid = info.sandbox_id
        start = time.monotonic()
        job = run(env, sid, "head -c 20000000 /dev/zero | tr '\\0' a; head -c 3000 /dev/zero | "
                            "tr '\\0' b >&2; echo done >&2", output_limit=1000)
        assert time.monotonic() - start < 60
        assert job.ok, job.error
        assert job.stdout_truncated and job.stderr_truncated
        assert job.stdout.startswith("a" * 1000) and not job.stdout.startswith("a" * 1001)
        assert "[orchard: output truncated, 19999000 bytes dropped]" in job.stdout, job.stdout[-200:]
        assert "bytes dropped]" in job.stderr and job.stderr.startswith("b" * 1000)
        small = run(env, sid, "echo small", output_limit=1000)
        assert small.stdout == "small\n" and not small.stdout_truncated


@check()
def check_files(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as info:
        sid, workdir = info.sandbox_id, info.spec.workdir
        assert env.write_file(sid, "notes/a.txt", b"hello\n") == f"{workdir}/notes/a.txt"
        assert ok(env, sid, "cat notes/a.txt") == "hello\n"
        assert env.read_file(sid, f"{workdir}/notes/a.txt") == b"hello\n"
        blob = bytes(range(256)) * 64
        env.write_file(sid, "/tmp/blob.bin", blob)
        assert env.read_file(sid, "/tmp/blob.bin") == blob
        assert ok(env, sid, "wc -c < /tmp/blob.bin").strip() == str(len(blob))
        ok(env, sid, "printf made-inside > inside.txt")
        assert env.read_file(sid, "inside.txt") == b"made-inside"
        env.write_file(sid, "run.sh", b"#!/bin/sh\necho ran\n", mode=0o755)
        assert ok(env, sid, "./run.sh") == "ran\n"
        env.write_file(sid, "notes/a.txt", b"new")
        assert env.read_file(sid, "notes/a.txt") == b"new"
        _refused(lambda: env.read_file(sid, "missing.txt"), NotFoundError, "reading a missing file")


def _refused(call: Callable[[], object], error: type[Exception], what: str) -> None:
    try:
        call()
    except error:
        return
    raise AssertionError(f"{what} was not refused with {error.__name__}")


@check()
def check_file_limits(env, spec_kwargs: dict) -> None:
    """Modes are permission bits (no setuid, no negatives); no file past MAX_FILE_BYTES is held
    whole in memory, either way (a sparse file the agent makes, say)."""
    with sandbox(env, spec_kwargs) as info:
        sid = info.sandbox_id
        modes = {mode: f"m{mode}.sh" for mode in (-1, 0o4755, 0o1000)}
        for mode, name in modes.items():
            _refused(lambda: env.write_file(sid, name, b"x", mode=mode), UsageError, f"mode {mode:o}")
        names = ok(env, sid, "ls -A").split()
        assert not set(modes.values()) & set(names), names  # nothing written
        ok(env, sid, f"truncate -s {MAX_FILE_BYTES + 1} big.bin")
        _refused(lambda: env.read_file(sid, "big.bin"), TooLargeError, "reading a file over the limit")
        _refused(lambda: env.write_file(sid, "too.bin", bytes(MAX_FILE_BYTES + 1)), TooLargeError,
                 "writing a file over the limit")


@check()
def check_path_escape(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as info:
        sid, workdir = info.sandbox_id, info.spec.workdir
        for path in ("../../etc/passwd", "/etc/passwd", f"{workdir}/../../etc/x", "/", "/usr/bin/x"):
            _refused(lambda: env.read_file(sid, path), PathEscapeError, f"reading {path!r}")
            _refused(lambda: env.write_file(sid, path, b"x"), PathEscapeError, f"writing {path!r}")


@check()
def check_apply_patch(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as info:
        sid = info.sandbox_id
        ok(env, sid, "mkdir repo && cd repo && git init -q && printf 'one\\ntwo\\nthree\\n' > f.txt && "
                     "git add f.txt && git -c user.email=t@t -c user.name=t commit -qm init")
        patch = ("diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n"
                 "@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n")
        result = env.apply_patch(sid, patch, cwd="repo")
        assert result.applied and result.method == "git apply", result
        assert env.read_file(sid, "repo/f.txt") == b"one\nTWO\nthree\n"
        unrelated = patch.replace(" one\n-two\n+TWO\n three", " alpha\n-beta\n+BETA\n gamma")
        bad = env.apply_patch(sid, unrelated, cwd="repo")
        assert not bad.applied, bad
        assert env.read_file(sid, "repo/f.txt") == b"one\nTWO\nthree\n"


@check(needs="readonly_root")
def check_readonly_root(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as info:
        sid = info.sandbox_id
        for target in ("/etc/orchard-probe", "/usr/orchard-probe", "/orchard-probe"):
            job = run(env, sid, f"echo x > {target}")
            assert job.exit_code not in (0, None), f"wrote {target}: {job}"
            assert run(env, sid, f"test -e {target}").exit_code != 0, f"{target} exists"
        assert run(env, sid, "mount -o remount,rw / || mount -o remount,rw /usr").exit_code != 0
        ok(env, sid, "echo x > in-workdir && echo x > /tmp/in-tmp")


@check(needs="writable_root")
def check_writable_root(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs, writable_root=True) as info:
        ok(env, info.sandbox_id, "echo x > /etc/orchard-probe && mkdir -p /usr/local/orchard-probe")
        assert ok(env, info.sandbox_id, "cat /etc/orchard-probe") == "x\n"
    with sandbox(env, spec_kwargs) as info:  # the changes died with the sandbox
        assert run(env, info.sandbox_id, "test -e /etc/orchard-probe").exit_code == 1


@check(needs="mounts")
def check_mounts(env, spec_kwargs: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="orchard-mount-") as ro, \
            tempfile.TemporaryDirectory(prefix="orchard-mount-") as rw:
        with open(os.path.join(ro, "given.txt"), "w") as fh:
            fh.write("from host\n")
        mounts = [Mount(source=ro, target="/opt/orchard-ro"),
                  Mount(source=rw, target="/orchard-rw", read_only=False)]
        with sandbox(env, spec_kwargs, mounts=mounts) as info:
            sid = info.sandbox_id
            assert ok(env, sid, "cat /opt/orchard-ro/given.txt") == "from host\n"
            assert run(env, sid, "echo x > /opt/orchard-ro/new").exit_code != 0
            ok(env, sid, "echo back > /orchard-rw/out.txt")
            assert ok(env, sid, "ls /usr/bin | head -1").strip(), "the image under /opt's parent is gone"
        with open(os.path.join(rw, "out.txt")) as fh:
            assert fh.read() == "back\n"
        assert not os.path.exists(os.path.join(ro, "new"))


@check(needs="network_block")
def check_network_none(env, spec_kwargs: dict) -> None:
    with loopback_server("host") as server, \
            sandbox(env, spec_kwargs, network="none") as info:
        sid = info.sandbox_id
        port = server.server_address[1]
        job = run(env, sid, _connect("127.0.0.1", port))
        assert job.exit_code not in (0, None), "network='none' reached a host loopback server"
        ifaces = ok(env, sid, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").split()
        assert ifaces in ([], ["lo"]), f"network='none' sees interfaces {ifaces}"
        assert not server.paths


CONNECT_TIMEOUT = """import socket, sys, time
started = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), float(sys.argv[3]))
    print("connected")
except socket.timeout:
    print("timeout", round(time.monotonic() - started, 1))
except OSError as exc:
    print("error", exc.errno)
"""


def _host_address() -> str | None:
    """This host's address on its default route (a LAN address), if it has one."""
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.1", 9))  # no packet is sent: it only picks the route
        return probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()


LOOKUP = """python3 -c '
import socket, time
started = time.monotonic()
try:
    socket.getaddrinfo("pypi.org", 443)
    print("resolved", round(time.monotonic() - started, 2))
except OSError:
    print("failed", round(time.monotonic() - started, 2))'"""


@check(needs="network_drop")
def check_network_drop(env, spec_kwargs: dict) -> None:
    """network='drop': a connect to an unroutable address waits for its timeout (not
    ENETUNREACH); a name lookup fails at once (no resolver wait); the host's loopback and its
    LAN address stay out of reach."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), _Handler)
    server.tag, server.paths = "lan", []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sandbox(env, spec_kwargs, network="drop") as info:
            sid = info.sandbox_id
            env.write_file(sid, "connect.py", CONNECT_TIMEOUT.encode())
            out = ok(env, sid, "python3 connect.py 10.255.255.1 80 1.5").split()
            assert out[0] == "timeout" and float(out[1]) >= 1.0, f"an unroutable connect gave {out}"
            lookup = ok(env, sid, LOOKUP).split()
            assert lookup[0] == "failed" and float(lookup[1]) < 3.0, f"a name lookup gave {lookup}"
            port = server.server_address[1]
            assert ok(env, sid, f"python3 connect.py 127.0.0.1 {port} 1").split()[0] == "error"
            lan = _host_address()
            if lan:
                assert ok(env, sid, f"python3 connect.py {lan} {port} 1").split()[0] != "connected"
            assert not server.paths
    finally:
        server.shutdown()
        server.server_close()


@check(needs="network_proxy")
def check_network_proxy(env, spec_kwargs: dict) -> None:
    with loopback_server("proxy") as proxy, loopback_server("other") as other:
        url = f"http://127.0.0.1:{proxy.server_address[1]}/prefix"
        with sandbox(env, spec_kwargs, network="proxy", proxy_url=url) as info:
            sid = info.sandbox_id
            assert ok(env, sid, 'echo "$ORCHARD_PROXY_URL"').strip().endswith("/prefix")
            for _ in range(3):      # several connections, one after another
                out = ok(env, sid, HTTP_GET)
                assert "200" in out.splitlines()[0] and out.endswith("proxy /prefix/hello"), out
            assert proxy.paths == ["/prefix/hello"] * 3, proxy.paths
            job = run(env, sid, _connect("127.0.0.1", other.server_address[1]))
            assert job.exit_code not in (0, None), "network='proxy' reached another host server"
            assert not other.paths


GREETING = "* OK orchard-forward"


@contextlib.contextmanager
def line_server() -> Iterator[tuple[int, list[int]]]:
    """A TCP server on the host's loopback that greets each connection with GREETING (as an
    IMAP server would); yields its port and a list that grows by one per connection."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            seen.append(1)
            with conn, contextlib.suppress(OSError):
                conn.sendall(f"{GREETING}\r\n".encode())

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()


def _greeting(port: int) -> str:
    """bash: connect to 127.0.0.1:<port> inside the sandbox and print the first line it sends."""
    return f"timeout 10 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && head -n 1 <&3'"


def _refused_inside(env, sid: str, ports: list[int], what: str) -> None:
    for port in ports:
        job = run(env, sid, _connect("127.0.0.1", port))
        assert job.exit_code not in (0, None), f"{what}: 127.0.0.1:{port} was reachable inside"


@check(needs="forwards")
def check_forwards_reach_only_their_target(env, spec_kwargs: dict) -> None:
    """spec.forwards: 127.0.0.1:1143 inside reaches the host server it names, and nothing else
    becomes reachable (not that server at its own port, not another host port); with network
    'proxy' the proxy and the forward both work, side by side."""
    with line_server() as (port, seen), loopback_server("other") as other:
        forwards = [{"port": 1143, "target": f"127.0.0.1:{port}"}]
        with sandbox(env, spec_kwargs, network="none", forwards=forwards) as info:
            sid = info.sandbox_id
            for _ in range(2):      # one connection after another
                assert ok(env, sid, _greeting(1143)).strip() == GREETING
            assert len(seen) == 2, seen
            _refused_inside(env, sid, [port, other.server_address[1], 1144], "network='none' + forwards")
            assert len(seen) == 2 and not other.paths
        backend = getattr(env, "backend", None)
        if "network_proxy" in getattr(backend, "unsupported", ()):
            return
        with loopback_server("proxy") as proxy:
            url = f"http://127.0.0.1:{proxy.server_address[1]}/prefix"
            with sandbox(env, spec_kwargs, network="proxy", proxy_url=url, forwards=forwards) as info:
                sid = info.sandbox_id
                out = ok(env, sid, HTTP_GET)
                assert out.endswith("proxy /prefix/hello"), out
                assert ok(env, sid, _greeting(1143)).strip() == GREETING
                inside = int(ok(env, sid, 'echo "$ORCHARD_PROXY_URL"').split("/")[2].rsplit(":", 1)[1])
                hosts = [p for p in (port, other.server_address[1], proxy.server_address[1]) if p != inside]
                _refused_inside(env, sid, hosts, "network='proxy' + forwards")
                assert len(seen) == 3 and not other.paths and proxy.paths == ["/prefix/hello"]


SERVICE_PROBE = ("python3 -c \"import urllib.request; "
                 "print(urllib.request.urlopen('http://web:8080/', timeout=10).status)\"")


@check(needs="services")
def check_services_reached_by_name(env, spec_kwargs: dict) -> None:
    """spec.services: a side service (the sandbox's image serving HTTP) is up before the sandbox
    is ready and answers at its name from it, with network 'none' and with 'proxy' (the proxy
    still reached beside it); it goes with the sandbox."""
    web = {"name": "web", "image": spec_kwargs.get("image", "host"), "workdir": "/tmp",
           "command": ["python3", "-m", "http.server", "8080"],
           "healthcheck": ["CMD", "python3", "-c",
                           "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/', timeout=2)"]}
    with sandbox(env, spec_kwargs, network="none", services=[web]) as info:
        assert ok(env, info.sandbox_id, SERVICE_PROBE).strip() == "200"
    with loopback_server("proxy") as proxy:
        url = f"http://127.0.0.1:{proxy.server_address[1]}/prefix"
        with sandbox(env, spec_kwargs, network="proxy", proxy_url=url, services=[web]) as info:
            assert ok(env, info.sandbox_id, SERVICE_PROBE).strip() == "200"
            assert ok(env, info.sandbox_id, HTTP_GET).endswith("proxy /prefix/hello")
    backend = getattr(env, "backend", None)  # in process: nothing of it is left on the backend
    if backend is not None:
        assert info.sandbox_id not in [r.sandbox_id for r in backend.resources()]


FORKS = """import os, time
n = 0
for _ in range(100):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(1); os.close(2); time.sleep(2); os._exit(0)
    n += 1
print(n)
"""


@check(needs="pids_limit")
def check_pids_limit(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as bystander, sandbox(env, spec_kwargs, pids=64) as info:
        sid = info.sandbox_id
        job = run(env, sid, "bomb() { bomb | bomb; }; bomb", timeout_seconds=3)
        assert job.status == "failed", job
        _recovers(env, sid)
        forked = ok(env, sid, ["python3", "-c", FORKS], timeout_seconds=60)
        assert int(forked) < 64, f"{forked.strip()} processes forked with pids=64"
        assert ok(env, bystander.sandbox_id, "echo fine") == "fine\n"


@check(needs="memory_limit")
def check_memory_limit(env, spec_kwargs: dict) -> None:
    with sandbox(env, spec_kwargs) as bystander, sandbox(env, spec_kwargs, memory="128Mi") as info:
        sid = info.sandbox_id
        job = run(env, sid, "head -c 1000000000 /dev/zero | tail > /dev/null", timeout_seconds=120)
        assert not job.ok, f"a 1 GB hog ran in 128Mi: {job}"
        _recovers(env, sid)
        assert ok(env, bystander.sandbox_id, "echo fine") == "fine\n"


def _recovers(env, sandbox_id: str, tries: int = 20) -> None:
    for _ in range(tries):
        job = run(env, sandbox_id, "echo alive", timeout_seconds=30)
        if job.ok and job.stdout == "alive\n":
            return
        time.sleep(0.5)
    raise AssertionError(f"the sandbox did not recover: {job}")


@check()
def check_destroy(env, spec_kwargs: dict) -> None:
    info = env.create_sandbox(SandboxSpec(**spec_kwargs), wait=True)
    sid = info.sandbox_id
    ok(env, sid, "echo data > file.txt; sleep 600 > /dev/null 2>&1 &")
    env.delete_sandbox(sid)
    for attempt in (lambda: env.get_sandbox(sid), lambda: env.read_file(sid, "file.txt")):
        try:
            attempt()
        except NotFoundError:
            continue
        raise AssertionError("a deleted sandbox still answers")
    backend = getattr(env, "backend", None)
    if backend is not None:
        assert sid not in [r.sandbox_id for r in backend.resources()], "resources left behind"


@check()
def check_destroy_ends_a_running_command(env, spec_kwargs: dict) -> None:
    """A command waited on when its sandbox is destroyed (an interrupted run) ends at once with
    an error, not at its timeout."""
    info = env.create_sandbox(SandboxSpec(**spec_kwargs), wait=True)
    done: list[Job | Exception] = []

    def wait() -> None:
        try:
            done.append(run(env, info.sandbox_id, "touch /tmp/started; sleep 600", timeout_seconds=900))
        except Exception as exc:  # the sandbox is gone (a service answers 404): ended too
            done.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the command is surely running
        try:
            env.read_file(info.sandbox_id, "/tmp/started")
            break
        except NotFoundError:
            time.sleep(0.1)
    else:
        raise AssertionError("the command never started")
    env.delete_sandbox(info.sandbox_id)
    waiter.join(60)
    assert not waiter.is_alive(), "a command of a destroyed sandbox still waits"
    ended = done[0] if done else None
    assert isinstance(ended, Exception) or (ended is not None and ended.status == "failed"), done


_ORPHAN = """
import json, sys, time
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import SandboxSpec
name, options, spec = json.loads(sys.argv[1])
manager = EnvManager(name, reap_interval=3600, **options)
info = manager.create_sandbox(SandboxSpec(**spec))
print(info.sandbox_id, flush=True)
time.sleep(600)
"""


def make_orphan(backend, spec_kwargs: dict) -> str:
    """Create a sandbox from a child process, then kill -9 it; returns the orphan's id."""
    payload = json.dumps([backend.name, getattr(backend, "options", {}), spec_kwargs])
    child = subprocess.Popen([sys.executable, "-c", _ORPHAN, payload], stdout=subprocess.PIPE,
                             text=True)
    try:
        line = child.stdout.readline().strip()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert line.startswith("sb-"), f"the child did not create a sandbox (printed {line!r})"
    return line


@check()
def check_gc_orphan(env, spec_kwargs: dict) -> None:
    backend = getattr(env, "backend", None)
    if backend is None:
        raise CheckSkipped("gc of an orphan needs an in-process EnvManager (the owner is killed)")
    orphan = make_orphan(backend, spec_kwargs)
    assert orphan in [r.sandbox_id for r in backend.resources()], "the orphan is not listed"
    with sandbox(env, spec_kwargs) as mine:
        reaped = env.gc()
        assert orphan in reaped, f"gc reaped {reaped}, not the orphan {orphan}"
        assert mine.sandbox_id not in reaped, "gc reaped a live owner's sandbox"
        assert orphan not in [r.sandbox_id for r in backend.resources()], "the orphan is still there"
        assert ok(env, mine.sandbox_id, "echo still") == "still\n"
