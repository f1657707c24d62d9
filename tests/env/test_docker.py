"""Docker-specific checks of the docker backend, against the real engine.

The behaviour every backend shares (exec, timeouts, files, network, limits) is checked by the
conformance suite; these look at what only docker has: the container's labels and limits, images
(missing ones, prepopulated workspaces), the engine exec path used for images without python3,
orphan gc after a kill -9, and the exec round-trip time against `docker exec`.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from orchard_cli.env.docker import DockerBackend
from orchard_cli.env.images import build_image_from, docker_client, ensure_base_image
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import ExecRequest, SandboxSpec
from orchard_cli.env.owner import owner_alive
from orchard_cli.errors import NotFoundError, UsageError

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def base():
    return ensure_base_image()


@pytest.fixture
def env():
    manager = EnvManager("docker")
    yield manager
    manager.close()


def run(manager, sid, command, **kw):
    return manager.exec(sid, ExecRequest(command=command, wait=True, **kw))


def inspect(sid):
    return docker_client().api.inspect_container(f"orchard-{sid}")


def containers_of(sid):
    return docker_client().api.containers(all=True, filters={"label": f"orchard.sandbox_id={sid}"})


def test_labels_limits_and_info(env, base):
    spec = SandboxSpec(image=base, cpu=0.5, memory="256Mi", pids=64, labels={"team": "t1"})
    info = env.create_sandbox(spec)
    assert (info.backend, info.isolation, info.limits) == ("docker", "docker", "docker")
    assert info.details["container"] == f"orchard-{info.sandbox_id}"
    data = inspect(info.sandbox_id)
    labels = data["Config"]["Labels"]
    assert labels["orchard.managed"] == "true"
    assert labels["orchard.sandbox_id"] == info.sandbox_id
    assert labels["orchard.owner"] == env.owner
    assert float(labels["orchard.expires_at"]) == pytest.approx(info.expires_at)
    assert labels["team"] == "t1"
    host = data["HostConfig"]
    assert host["NanoCpus"] == 500_000_000
    assert host["Memory"] == host["MemorySwap"] == 256 * 1024**2
    assert host["PidsLimit"] == 64
    assert host["ReadonlyRootfs"] is True and host["Init"] is True
    assert host["NetworkMode"] == "none"
    # The limits are the container's cgroup's, seen from inside.
    job = run(env, info.sandbox_id, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes "
                                    "/sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/memory.max")
    assert str(256 * 1024**2) in job.stdout
    assert [r.sandbox_id for r in env.backend.resources()].count(info.sandbox_id) == 1
    cores = docker_client().info()["NCPU"]
    many = env.create_sandbox(SandboxSpec(image=base, cpu=cores + 7))  # clamped to what there is
    assert inspect(many.sandbox_id)["HostConfig"]["NanoCpus"] == cores * 1_000_000_000
    assert host["AutoRemove"] is True and labels["orchard.auto_remove"] == "true"
    assert data["Config"]["Healthcheck"]["Test"] == ["NONE"]  # the engine runs nothing in it
    pid, cid = data["State"]["Pid"], data["Id"]
    env.delete_sandbox(info.sandbox_id)  # killed; the engine removes it, as `docker run --rm` ones
    assert info.sandbox_id not in [r.sandbox_id for r in env.backend.resources()]
    # killed from this host (pidkill): nothing of it runs once destroy returns, though the engine
    # may still call it running for the few ms until it has seen the exit
    assert not _alive_in(pid, cid)
    assert [c["State"] for c in containers_of(info.sandbox_id)] in ([], ["running"], ["exited"], ["removing"])
    deadline = time.monotonic() + 60
    while containers_of(info.sandbox_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert containers_of(info.sandbox_id) == []
    env.backend.destroy(info.sandbox_id)  # idempotent


def _alive_in(pid: int, cid: str) -> bool:
    """Whether process `pid` runs in container `cid` (a zombie, dead and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            ours = cid in f.read()
        with open(f"/proc/{pid}/stat") as f:
            return ours and f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_pidkill_leaves_what_is_not_the_containers_alone(env, base):
    from orchard_cli.env import pidkill

    one, other = (env.create_sandbox(SandboxSpec(image=base)) for _ in range(2))
    state = inspect(one.sandbox_id)
    pid = state["State"]["Pid"]
    assert not pidkill.kill_container(pid, inspect(other.sandbox_id)["Id"])  # another container's id
    assert not pidkill.kill_container(os.getpid() + 10**7, state["Id"])  # no such process here
    assert _alive_in(pid, state["Id"]) and run(env, one.sandbox_id, "echo ok").stdout == "ok\n"
    run(env, one.sandbox_id, "sleep 600 & sleep 600 & echo started")
    assert pidkill.kill_container(pid, state["Id"])
    assert not _alive_in(pid, state["Id"])
    procs = [p for p in os.listdir("/proc") if p.isdigit() and _alive_in(int(p), state["Id"])]
    assert procs == []  # the background sleeps went with its first process
    env.delete_sandbox(one.sandbox_id)  # the engine's view may lag; destroy still cleans up
    env.delete_sandbox(other.sandbox_id)
    deadline = time.monotonic() + 60
    while (containers_of(one.sandbox_id) or containers_of(other.sandbox_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert containers_of(one.sandbox_id) == containers_of(other.sandbox_id) == []


def test_an_id_used_again_at_once_and_a_closed_backend_leaves_nothing_running(base):
    manager = EnvManager("docker")
    try:
        first = manager.create_sandbox(SandboxSpec(image=base), sandbox_id="reused-id")
        old = inspect("reused-id")["Id"]
        manager.delete_sandbox(first.sandbox_id)
        again = manager.create_sandbox(SandboxSpec(image=base), sandbox_id="reused-id")  # its name is free
        assert again.sandbox_id == "reused-id" and inspect("reused-id")["Id"] != old
        assert [r.sandbox_id for r in manager.backend.resources()].count("reused-id") == 1  # the new one
        assert run(manager, "reused-id", "echo ok").stdout == "ok\n"
        killed = [manager.create_sandbox(SandboxSpec(image=base)).sandbox_id for _ in range(3)]
        for sid in killed:
            manager.delete_sandbox(sid)
    finally:
        manager.close()
    # another process (a fresh backend) sees none of them: close() waited for the engine
    fresh = DockerBackend()
    assert not {"reused-id", *killed} & {r.sandbox_id for r in fresh.resources()}
    assert not [c for sid in ("reused-id", *killed) for c in containers_of(sid)]


def test_destroy_asks_the_engine_where_it_cannot_kill_here(env, base, monkeypatch):
    from orchard_cli.env import pidkill

    monkeypatch.setattr(pidkill, "kill_container", lambda pid, cid, timeout=10.0: False)  # elsewhere
    info = env.create_sandbox(SandboxSpec(image=base))
    env.delete_sandbox(info.sandbox_id)  # the engine's kill returns once it has stopped
    assert [c["State"] for c in containers_of(info.sandbox_id)] in ([], ["exited"], ["removing"])
    assert info.sandbox_id not in [r.sandbox_id for r in env.backend.resources()]


def test_missing_image_is_a_one_line_usage_error(env, _orchard_home):
    with pytest.raises(UsageError) as caught:
        env.create_sandbox(SandboxSpec(image="orchard-test/no-such-image:1"))
    message = caught.value.message
    assert "orchard-test/no-such-image:1 does not exist locally and could not be pulled" in message
    assert "\n" not in message and caught.value.hint
    mine = docker_client().api.containers(all=True, filters={"label": f"orchard.owner={env.owner}"})
    assert mine == []
    assert list((_orchard_home / "env" / "docker").glob("*")) == []


def test_read_only_root_with_writable_workspace_and_tmp(env, base, _orchard_home):
    info = env.create_sandbox(SandboxSpec(image=base))
    job = run(env, info.sandbox_id, "touch /etc/x /usr/x /x 2>&1; echo hi > out.txt && echo t > /tmp/t")
    assert job.stdout.count("Read-only file system") == 3
    assert job.exit_code == 0
    host = _orchard_home / "env" / "docker" / info.sandbox_id
    assert (host / "workspace" / "out.txt").read_text() == "hi\n"
    assert (host / "tmp" / "t").read_text() == "t\n"
    env.write_file(info.sandbox_id, "deep/new.txt", b"x")
    assert run(env, info.sandbox_id, "cat deep/new.txt").stdout == "x"


def test_symlinks_never_lead_host_side_file_access_out(env, base, tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only")
    info = env.create_sandbox(SandboxSpec(image=base))
    sid = info.sandbox_id
    run(env, sid, f"ln -s {secret} s; ln -s /etc e; ln -s /etc/hostname h; ln -s {tmp_path} d")
    with pytest.raises(NotFoundError):
        env.read_file(sid, "s")  # the host's path means nothing inside the container
    assert env.read_file(sid, "h").strip() == run(env, sid, "cat /etc/hostname").stdout.strip().encode()
    with pytest.raises(UsageError):
        env.write_file(sid, "e/evil", b"x")  # the container's /etc is read-only
    # The host's tmp_path is below /tmp, which in the sandbox is the sandbox's own /tmp.
    env.write_file(sid, "d/planted", b"x")
    assert run(env, sid, f"cat {tmp_path}/planted").stdout == "x"
    assert not (tmp_path / "planted").exists()
    assert not os.path.exists("/etc/evil")
    assert secret.read_text() == "host only"


def test_workspace_prepopulated_from_the_image(env, base):
    image = build_image_from(base, textwrap.dedent("""\
        RUN mkdir -p /testbed/pkg && cd /testbed && git init -q && echo hello > a.txt \\
            && echo 'x = 1' > pkg/mod.py && ln -s a.txt link && chmod 0750 /testbed \\
            && git add -A && git -c user.email=t@t -c user.name=t commit -qm init
        WORKDIR /testbed
        """), "orchard-test/prepopulated:1")
    started = time.monotonic()
    info = env.create_sandbox(SandboxSpec(image=image, workdir="/testbed"))
    print(f"\ncreate with a prepopulated workspace: {time.monotonic() - started:.2f}s")
    sid = info.sandbox_id
    job = run(env, sid, "cat a.txt pkg/mod.py; readlink link; git status --porcelain; "
                        "stat -c %a /testbed")
    assert job.stdout == "hello\nx = 1\na.txt\n750\n", job.stderr
    assert env.read_file(sid, "pkg/mod.py") == b"x = 1\n"
    env.apply_patch(sid, "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-hello\n+patched\n")
    assert run(env, sid, "cat a.txt").stdout == "patched\n"


def test_engine_exec_path(base):
    """Images without python3 run commands through the engine's exec API: same rules."""
    with EnvManager(DockerBackend(exec_mode="engine")) as env:
        sid = env.create_sandbox(SandboxSpec(image=base)).sandbox_id
        assert env.get_sandbox(sid).details["exec"] == "engine"
        job = run(env, sid, "echo out; echo err >&2; pwd; exit 3")
        assert (job.exit_code, job.stdout, job.stderr) == (3, "out\n/workspace\n", "err\n")
        assert run(env, sid, ["cat"], stdin="from stdin").stdout == "from stdin"
        assert run(env, sid, "echo $A", env={"A": "b"}, cwd="/tmp").stdout == "b\n"
        job = run(env, sid, "head -c 5000 /dev/zero | tr '\\0' a", output_limit=100)
        assert job.stdout_truncated and job.stdout.startswith("a" * 100)
        assert "4900 bytes dropped" in job.stdout
        started = time.monotonic()
        job = run(env, sid, "setsid sleep 300 & (sleep 301 &); sleep 302", timeout_seconds=1)
        assert job.status == "failed" and job.timed_out and job.exit_code == 124
        assert time.monotonic() - started < 10
        left = run(env, sid, "ps -eo args | grep -c '^sleep 30[012]'").stdout.strip()
        assert left == "0"
        job = run(env, sid, "true", cwd="/workspace/missing")
        assert job.status == "failed" and job.did_not_run and "does not exist" in job.error


def test_proxy_network_reaches_only_the_proxy(env, base):
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"proxied {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        url = f"http://127.0.0.1:{port}/v1"
        sid = env.create_sandbox(SandboxSpec(image=base, network="proxy", proxy_url=url)).sandbox_id
        job = run(env, sid, ["python3", "-c", "import os, urllib.request; print(urllib.request."
                             "urlopen(os.environ['ORCHARD_PROXY_URL'] + '/models').read().decode())"])
        assert job.stdout.strip() == "proxied /v1/models", job.stderr
        # The same server on the host's docker0 address: a 'full' sandbox reaches it, this not.
        full = env.create_sandbox(SandboxSpec(image=base, network="full")).sandbox_id
        gateway = _hex_gateway(run(env, full, "cat /proc/net/route").stdout)
        probe = (f"import socket; s = socket.socket(); s.settimeout(3); "
                 f"s.connect(('{gateway}', {port})); print('connected')")
        assert run(env, full, ["python3", "-c", probe]).stdout.strip() == "connected"
        assert run(env, sid, ["python3", "-c", probe]).exit_code != 0
    finally:
        server.shutdown()


def _hex_gateway(route: str) -> str:
    for line in route.splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return ".".join(str(b) for b in bytes.fromhex(fields[2])[::-1])
    raise AssertionError(f"no default route in {route!r}")


OWNER_SCRIPT = """
import sys, time
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import SandboxSpec
env = EnvManager("docker")
print(env.create_sandbox(SandboxSpec(image=sys.argv[1])).sandbox_id, flush=True)
time.sleep(600)
"""


def test_gc_reaps_containers_of_a_killed_owner(base, _orchard_home):
    owner = subprocess.Popen([sys.executable, "-c", OWNER_SCRIPT, base], stdout=subprocess.PIPE,
                             text=True)
    try:
        sid = owner.stdout.readline().strip()
        assert sid.startswith("sb-") and len(containers_of(sid)) == 1
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    with EnvManager("docker") as env:
        assert sid in env.gc()
    assert containers_of(sid) == []
    assert not (_orchard_home / "env" / "docker" / sid).exists()
    # Nothing of a dead owner is left on the engine, whoever made it.
    left = docker_client().api.containers(all=True, filters={"label": "orchard.managed=true"})
    assert [c["Names"] for c in left if not owner_alive(c["Labels"]["orchard.owner"])] == []


def test_later_sandboxes_of_an_image_are_ready_before_their_runner(env, base):
    """The first sandbox of an image waits for its runner's hello at creation (so it learns the
    image runs the runner, and its shell); later ones are ready once their container runs, and
    their first commands (two at once here) wait for the hello: nothing runs in the sandbox
    before the runner holds the socket. One destroyed before any command leaves nothing."""
    first = env.create_sandbox(SandboxSpec(image=base))
    later = env.create_sandbox(SandboxSpec(image=base))
    assert later.details["exec"] == first.details["exec"] == "runner"
    assert later.details["runner_protected"] == first.details["runner_protected"]
    channel = env.backend._live[later.sandbox_id][0]
    assert channel.conn is None and not channel.ready  # accepted by the first command, not by create
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(run(env, later.sandbox_id, "echo $0; id -u")))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert [r.stdout.split() for r in results] == [["/bin/bash", "0"]] * 2, results
    assert channel.ready and not channel.dead
    assert run(env, first.sandbox_id, "echo $0").stdout.strip() == "/bin/bash"
    gone = env.create_sandbox(SandboxSpec(image=base))
    unused = env.backend._live[gone.sandbox_id][0]
    env.delete_sandbox(gone.sandbox_id)
    assert unused.dead and unused.listener is None and unused.conn is None
    assert gone.sandbox_id not in [r.sandbox_id for r in env.backend.resources()]
    deadline = time.monotonic() + 60
    while containers_of(gone.sandbox_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert containers_of(gone.sandbox_id) == []
    for info in (first, later):
        env.delete_sandbox(info.sandbox_id)


def test_exec_round_trip_against_docker_exec_cli(env, base):
    sid = env.create_sandbox(SandboxSpec(image=base)).sandbox_id
    name = f"orchard-{sid}"

    def median_ms(fn, n=15):
        fn()
        times = []
        for _ in range(n):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000

    agent = median_ms(lambda: run(env, sid, "true"))
    sandbox = env._ready(sid)
    engine = median_ms(lambda: _engine_run(sandbox))
    cli = median_ms(lambda: subprocess.run(["docker", "exec", name, "true"], check=True))
    print(f"\nexec round trip, median ms: orchard docker {agent:.1f} | engine exec API "
          f"{engine:.1f} | docker exec CLI {cli:.1f}")


def _engine_run(sandbox):
    from orchard_cli.env.docker_io import engine_exec

    return engine_exec(sandbox.backend.api, sandbox.container_id, "true", env={},
                       cwd="/workspace", stdin=None, timeout=30, limit=1024,
                       ctl_host=sandbox.root / "ctl", ctl_sandbox="/run/orchard")


ENGINE_CHECKS = ["exec", "jobs", "cwd_env", "timeout", "truncation", "files", "apply_patch",
                 "network_proxy", "memory_limit", "gc_orphan"]


@pytest.fixture(scope="module")
def engine_env():
    manager = EnvManager(DockerBackend(exec_mode="engine"))
    yield manager
    manager.close()


@pytest.mark.slow
@pytest.mark.parametrize("check", ENGINE_CHECKS)
def test_conformance_through_the_engine_exec_path(check, engine_env, base):
    """Images without python3 get the engine exec path: it must keep the same contract."""
    from orchard_cli.env.conformance import CHECKS

    CHECKS[check](engine_env, {"image": base})
    assert engine_env.list_sandboxes() == []


@pytest.mark.parametrize("tar_binary", ["tar", None], ids=["gnu-tar", "tarfile"])
def test_extract_workdir_keeps_links_and_stays_inside(tmp_path, tar_binary):
    """Both unpackers of an image's workdir: content, modes, links; no member lands outside."""
    import io
    import tarfile

    from orchard_cli.env.docker_io import extract_workdir

    def member(name, kind=tarfile.REGTYPE, data=b"", mode=0o644, link=""):
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.size, info.linkname = kind, mode, len(data), link
        return info, io.BytesIO(data) if data else None

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in [member("testbed", tarfile.DIRTYPE, mode=0o750),
                           member("testbed/a.txt", data=b"hello\n"),
                           member("testbed/sub", tarfile.DIRTYPE, mode=0o755),
                           member("testbed/sub/run.sh", data=b"#!/bin/sh\n", mode=0o755),
                           member("testbed/link", tarfile.SYMTYPE, link="a.txt"),
                           member("testbed/hard", tarfile.LNKTYPE, link="testbed/a.txt"),
                           member("testbed/out", tarfile.SYMTYPE, link=str(tmp_path / "outside")),
                           member("testbed/out/escaped.txt", data=b"x")]:
            tar.addfile(info, data)
    dest = tmp_path / "ws"
    dest.mkdir()
    raw = buf.getvalue()
    try:
        extract_workdir([raw[i:i + 1000] for i in range(0, len(raw), 1000)], "/testbed", dest,
                        tar_binary=tar_binary)
    except Exception as exc:  # refusing the escaping member is fine; following it is not
        print(f"refused: {exc}")
    assert (dest / "a.txt").read_bytes() == b"hello\n"
    assert oct(dest.stat().st_mode & 0o777) == "0o750"
    assert os.access(dest / "sub" / "run.sh", os.X_OK)
    assert os.readlink(dest / "link") == "a.txt"
    assert (dest / "hard").read_bytes() == b"hello\n"
    assert not (tmp_path / "outside").exists()


def test_base_image_is_rebuilt_only_when_its_recipe_changes(base, monkeypatch):
    from orchard_cli.env import images

    built = []

    def debootstrap_stand_in(client, name, recipe, quiet):  # the real one downloads for ~50 s
        built.append(name)
        build_image_from(base, f"LABEL {images.RECIPE_LABEL}={recipe}", name)

    monkeypatch.setattr(images, "_build_base", debootstrap_stand_in)
    assert images.ensure_base_image() == base and built == []
    api = docker_client().api
    stale = build_image_from(base, f"LABEL {images.RECIPE_LABEL}=old", "orchard-test/stale-base:1")
    old_id = api.inspect_image(stale)["Id"]
    try:
        assert images.ensure_base_image(stale) == stale and built == [stale]
        labels = api.inspect_image(stale)["Config"]["Labels"]
        assert labels[images.RECIPE_LABEL] == images.recipe_hash()
        assert images.ensure_base_image(stale) == stale and built == [stale]
    finally:
        for image in (stale, old_id):
            with contextlib.suppress(Exception):
                api.remove_image(image, force=True)


def test_image_with_a_non_root_user(env, base):
    image = build_image_from(base, "RUN useradd -m -u 1234 agent\nUSER agent\n",
                             "orchard-test/non-root:1")
    sid = env.create_sandbox(SandboxSpec(image=image)).sandbox_id
    assert run(env, sid, "id -un; touch made && stat -c %U made").stdout == "agent\nagent\n"
    env.write_file(sid, "sub/from-api.txt", b"x")
    job = run(env, sid, "stat -c %U sub sub/from-api.txt; echo more >> sub/from-api.txt; cat sub/from-api.txt")
    assert job.stdout == "agent\nagent\nxmore\n", job.stderr


def test_runner_channel_cannot_be_reached_from_inside(env, base):
    """Results come over a connection no sandbox process can open or read: no forged exit codes."""
    info = env.create_sandbox(SandboxSpec(image=base))
    assert info.details["exec"] == "runner" and info.details["runner_protected"] == "true"
    job = run(env, info.sandbox_id, "ls /run/orchard; pid=$(pgrep -o -f /run/orchard/ctl.sock); "
                                    "for fd in /proc/$pid/fd/*; do readlink $fd || cat $fd; done "
                                    "2>/dev/null | grep -c . || echo refused")
    assert "ctl.sock" not in job.stdout and job.stdout.endswith("0\nrefused\n"), job.stdout
