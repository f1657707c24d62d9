"""The local backend beyond the conformance suite: escapes, reporting, scale, orphans, no bwrap."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from orchard_cli.env import cgroups, local
from orchard_cli.env.base import CAPABILITIES
from orchard_cli.env.conformance import loopback_server, make_orphan, ok, run
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import ExecRequest, Mount, SandboxSpec
from orchard_cli.errors import NotFoundError, PathEscapeError, SandboxError, UsageError

pytestmark = pytest.mark.bwrap


@pytest.fixture()
def env(tmp_path):
    manager = EnvManager("local", root=str(tmp_path / "local"))
    yield manager
    manager.close()


@pytest.fixture()
def sid(env):
    return env.create_sandbox(SandboxSpec()).sandbox_id


def _gone(pid: int, timeout: float = 5.0) -> bool:
    """True once `pid` has exited (a zombie counts as exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def _marked_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return [p for p in found if not _gone(p, 0)]


# ---- files -----------------------------------------------------------------------------------

def test_symlinks_cannot_escape_the_workspace(env, sid):
    ok(env, sid, "ln -s /etc etc-link; ln -s /etc/passwd pw; ln -s ../../.. up; "
                 "echo real > real.txt; ln -s real.txt alias; ln -s /workspace/real.txt abs-alias; "
                 "ln -s /tmp tmp-link; echo in-tmp > /tmp/t.txt")
    for path in ("etc-link/passwd", "pw", "up/etc/passwd", "etc-link/orchard-probe"):
        with pytest.raises(PathEscapeError):
            env.read_file(sid, path)
        with pytest.raises(PathEscapeError):
            env.write_file(sid, path, b"x")
    assert not os.path.exists("/etc/orchard-probe")
    assert Path("/etc/passwd").read_bytes() != b"x"
    assert env.read_file(sid, "alias") == b"real\n"
    assert env.read_file(sid, "abs-alias") == b"real\n"
    assert env.read_file(sid, "tmp-link/t.txt") == b"in-tmp\n"
    env.write_file(sid, "alias", b"through the link\n")
    assert ok(env, sid, "cat real.txt") == "through the link\n"
    workspace = env.get_sandbox(sid).details["workspace"]
    ok(env, sid, f"ln -s {workspace}/real.txt host-path-link")
    with pytest.raises((PathEscapeError, NotFoundError)):   # the sandbox's view, not the host's
        env.read_file(sid, "host-path-link")


def test_file_api_edges(env, sid):
    ok(env, sid, "mkdir d; mkfifo fifo")
    with pytest.raises(UsageError):
        env.read_file(sid, "d")
    with pytest.raises(UsageError):
        env.write_file(sid, "fifo", b"would block")
    with pytest.raises(NotFoundError):
        env.read_file(sid, "nope/deeper.txt")
    env.write_file(sid, "/tmp/a/b/c.txt", b"deep", mode=0o600)
    assert ok(env, sid, "stat -c %a /tmp/a/b/c.txt").strip() == "600"


# ---- exec ------------------------------------------------------------------------------------

def test_exec_reports_signals_bad_bytes_and_a_dead_runner(env, sid):
    assert run(env, sid, "kill -9 $$").exit_code == 137
    assert run(env, sid, "printf 'a\\377b'").stdout == "a\ufffdb"
    job = run(env, sid, "(sleep 1; echo late; echo more >&2; touch /tmp/bg-done) & echo now", keep_background=True)
    assert job.ok and job.stdout == "now\n" and job.duration_seconds < 1.0, \
        "a background child held the command open"
    time.sleep(1.5)
    assert ok(env, sid, "ls /tmp/bg-done") == "/tmp/bg-done\n", "the background child was killed"
    runner = int(env.get_sandbox(sid).details["runner_pid"])
    os.kill(runner, 9)
    job = run(env, sid, "echo hi")
    assert job.status == "failed" and job.did_not_run and job.exit_code is None and "runner" in job.error, job


def test_spawn_failures_say_why_and_finished_keepers_are_reaped(env, sid):
    """The runner starts commands by posix_spawn under a keeper forked ahead (a spare); a program
    that is missing or cannot run still exits 127 / 126 with the reason on stderr; a job is
    answered from its keeper's report, the keeper reaped afterwards: however many commands ran,
    the runner's only child is the next spare, and a spare killed before its turn costs nothing
    but a fork (it is reaped, the command runs)."""
    job = run(env, sid, ["no-such-program-orchard"])
    assert job.exit_code == 127 and "orchard: no-such-program-orchard: " in job.stderr, job
    ok(env, sid, "printf 'echo hi' > /tmp/not-exec; chmod 644 /tmp/not-exec")
    job = run(env, sid, ["/tmp/not-exec"])
    assert job.exit_code == 126 and "Permission denied" in job.stderr, job
    assert run(env, sid, ["sh", "-c", "exit 7"]).exit_code == 7
    assert run(env, sid, ["sh", "-c", "kill -TERM $$"]).exit_code == 143
    assert ok(env, sid, "cat", stdin="in\n") == "in\n" and ok(env, sid, "cat") == ""
    for i in range(40):
        assert ok(env, sid, ["echo", str(i)]) == f"{i}\n"
    runner = int(env.get_sandbox(sid).details["runner_pid"])

    def children() -> list[tuple[int, str]]:
        found = []
        for task in Path(f"/proc/{runner}/task").iterdir():
            for pid in (task / "children").read_text().split():
                with contextlib.suppress(OSError, IndexError):
                    found.append((int(pid), Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]))
        return found

    def settled(but: int = 0) -> list[tuple[int, str]]:
        """The runner's children once only one is left, waiting (S), and not `but`."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = children()
            if [state for _, state in found] == ["S"] and found[0][0] != but:
                break
            time.sleep(0.05)
        return found

    [(spare, state)] = settled()
    assert state == "S", f"the runner's one child is {state}, not a waiting keeper"
    os.kill(spare, 9)
    assert _gone(spare), "the spare keeper did not die"
    assert ok(env, sid, "echo after") == "after\n"
    [(_, state)] = settled(but=spare)
    assert state == "S"


def test_commands_cannot_forge_replies_or_regain_privileges(env, sid):
    assert env.get_sandbox(sid).details["runner_protected"] == "true"
    forged = ('{"id": %d, "exit": 0, "timed_out": false, "out": "Rk9SR0VE", "err": "", '
              '"out_dropped": 0, "err_dropped": 0, "duration": 0.1}')
    attack = "; ".join(
        f"for f in /proc/[0-9]*/fd/*; do echo '{forged % i}' > $f; done 2>/dev/null"
        for i in range(2, 12))
    run(env, sid, attack + "; true")
    for _ in range(5):
        assert ok(env, sid, "echo real") == "real\n"
    steal = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nstolen = 0\n"
             "pidfd = os.pidfd_open(2)\nfor fd in range(64):\n"   # the runner is pid 2
             "    stolen += libc.syscall(438, pidfd, fd, 0) >= 0\n"   # pidfd_getfd
             "print(stolen)")
    assert ok(env, sid, ["python3", "-c", steal]) == "0\n", "a command could take the runner's fds"
    assert ok(env, sid, "grep CapEff /proc/self/status").split()[1] == "0000000000000000"
    assert run(env, sid, "mount -o remount,rw /usr").exit_code != 0
    assert run(env, sid, "echo x > /usr/orchard-probe").exit_code != 0
    assert not os.path.exists("/usr/orchard-probe")


def test_exec_round_trip_is_fast(env, sid):
    """A loose guard against losing the long-lived runner (a bwrap per command costs 5-7 ms)."""
    def once(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    floor = statistics.median(once(lambda: subprocess.run(["true"])) for _ in range(30))
    sandboxed = statistics.median(
        once(lambda: env.exec(sid, ExecRequest(command=["true"], wait=True))) for _ in range(30))
    assert sandboxed < floor + 0.015, f"exec {sandboxed * 1e3:.1f} ms vs floor {floor * 1e3:.1f} ms"


# ---- reporting -------------------------------------------------------------------------------

def test_isolation_and_limits_are_reported_and_enforced(env):
    info = env.create_sandbox(SandboxSpec(memory="256Mi", pids=99, cpu=0.5))
    assert (info.backend, info.status, info.isolation) == ("local", "ready", "bwrap")
    support = cgroups.detect()
    assert info.limits == support.label and info.limits in ("cgroup-v1", "cgroup-v2")
    assert Path(info.details["workspace"]).is_dir()
    runner = int(info.details["runner_pid"])
    dirs = info.details["cgroups"].split(",")
    assert all(runner in cgroups.procs([d]) for d in dirs), "the runner is not in its cgroups"
    if info.limits == "cgroup-v1":
        mem = next(d for d in dirs if "/memory/" in d)
        assert Path(mem, "memory.limit_in_bytes").read_text().strip() == str(256 * 1024**2)
        pids = next(d for d in dirs if "/pids/" in d)
        assert Path(pids, "pids.max").read_text().strip() == "99"
    else:
        assert Path(dirs[0], "memory.max").read_text().strip() == str(256 * 1024**2)
        assert Path(dirs[0], "pids.max").read_text().strip() == "99"
    # A command is in the cgroups from its first instruction.
    ok(env, info.sandbox_id, "sleep 30 &")
    assert len(cgroups.procs(dirs)) >= 2


def test_a_setuid_program_left_in_the_workspace_is_not_one_on_the_host(env):
    """Made by root inside, seen from the host: the workspace and /tmp are nosuid host mounts
    (orchard as root), or the file is not root's (orchard as another user); gone at destroy."""
    info = env.create_sandbox(SandboxSpec())
    ok(env, info.sandbox_id, "cp /bin/true ./su-left && chmod 4755 ./su-left && cp /bin/true /tmp/su-tmp "
                             "&& chmod 4755 /tmp/su-tmp")
    work = Path(info.details["workspace"])
    for path in (work / "su-left", work.parent / "tmp" / "su-tmp"):
        assert path.stat().st_mode & 0o4000  # the bit is there ...
        if os.geteuid() == 0:  # ... but the host does not honour it
            assert os.statvfs(path).f_flag & os.ST_NOSUID, f"{path.parent} is not mounted nosuid"
        else:
            assert path.stat().st_uid != 0
    env.delete_sandbox(info.sandbox_id)
    assert not work.exists() and str(work) not in Path("/proc/self/mountinfo").read_text()


def test_cgroup_v2_layout_on_a_delegated_tree(tmp_path):
    """The v2 path on a stand-in tree (this machine's v2 hierarchy has no controllers)."""
    own = tmp_path / "user.slice" / "me.scope"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    mountinfo = f"35 24 0:30 / {tmp_path} rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    support = cgroups.detect_from(mountinfo, "0::/user.slice/me.scope\n")
    assert (support.mode, support.parents) == ("cgroup-v2", {"unified": own})
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    dirs = cgroups.create(support, "sb-x", memory=1 << 30, pids=77, cpu=1.5)
    assert dirs == [str(own / "orchard-sb-x")]
    assert (own / "orchard-sb-x" / "memory.max").read_text() == str(1 << 30)
    assert (own / "orchard-sb-x" / "pids.max").read_text() == "77"
    assert cgroups.join_prefix(dirs)[-2:] == [f"{dirs[0]}/cgroup.procs", "--"]
    (own / "cgroup.controllers").write_text("cpu memory\n")     # pids not delegated
    support = cgroups.detect_from(mountinfo, "0::/user.slice/me.scope\n")
    assert support.mode == "none" and "pids" in support.label and support.label.startswith("none: ")


def test_without_a_usable_cgroup_limits_say_none(tmp_path, monkeypatch):
    monkeypatch.setattr(local.cgroups, "detect",
                        lambda: cgroups.CgroupSupport("none", reason="no cgroup for this test"))
    with EnvManager("local", root=str(tmp_path / "local")) as env:
        assert {"memory_limit", "pids_limit"} <= env.backend.unsupported
        info = env.create_sandbox(SandboxSpec())
        assert info.limits == "none: no cgroup for this test"
        assert ok(env, info.sandbox_id, "echo fine") == "fine\n"


def test_without_bwrap_it_refuses_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    monkeypatch.setattr(local, "_warned", False)
    with pytest.warns(RuntimeWarning, match="NO isolation"):
        env = EnvManager("local", root=str(tmp_path / "local"))
    try:
        assert env.backend.unsupported == CAPABILITIES
        with pytest.raises(SandboxError) as err:
            env.create_sandbox(SandboxSpec())
        assert "apt-get install bubblewrap" in err.value.hint
        monkeypatch.setenv("ORCHARD_ALLOW_NO_ISOLATION", "1")
        info = env.create_sandbox(SandboxSpec())
        assert info.isolation == "none"
        assert ok(env, info.sandbox_id, "pwd").strip() == info.details["workspace"]
        env.write_file(info.sandbox_id, "f.txt", b"shared")
        assert ok(env, info.sandbox_id, "cat f.txt; echo $HOME") == \
            f"shared{info.details['workspace']}\n"
        ok(env, info.sandbox_id, "sleep 6000.4343 > /dev/null 2>&1 &")
    finally:
        env.close()
    deadline = time.monotonic() + 5
    while _marked_processes("6000.4343") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _marked_processes("6000.4343") == [], "a command outlived its unisolated sandbox"


def test_bad_images_and_mounts_fail_clearly_and_leave_nothing(env):
    for image in ("orchard-test/no-such-image:404", "relative/dir", "/no/such/dir"):
        with pytest.raises(UsageError) as err:
            env.create_sandbox(SandboxSpec(image=image))
        assert repr(image) in str(err.value) and "root filesystem" in str(err.value)
        assert "host" in err.value.hint
    with pytest.raises(SandboxError, match="nonexistent-source"):
        env.create_sandbox(SandboxSpec(mounts=[Mount(source="/nonexistent-source", target="/x")]))
    assert not list(env.backend.root.iterdir())
    assert env.list_sandboxes() == []


def test_a_script_that_forgets_close_leaves_nothing(tmp_path):
    root = tmp_path / "local"
    script = ("from orchard_cli.env.manager import EnvManager\n"
              "from orchard_cli.env.models import SandboxSpec\n"
              f"m = EnvManager('local', root={str(root)!r})\n"
              "info = m.create_sandbox(SandboxSpec())\n"
              "print(info.details['cgroups'])\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert list(root.iterdir()) == []
    assert not any(os.path.exists(d) for d in out.stdout.strip().split(",") if d)


# ---- network ---------------------------------------------------------------------------------

class _Big(http.server.BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    body = os.urandom(3 << 20)

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def test_proxy_relays_large_bodies_and_full_network_reaches_the_host(env):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Big)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        sid = env.create_sandbox(SandboxSpec(network="proxy", proxy_url=url)).sandbox_id
        fetch = ("import hashlib, os, urllib.request as u; "
                 "print(hashlib.sha256(u.urlopen(os.environ['ORCHARD_PROXY_URL'] + '/big').read())"
                 ".hexdigest())")
        import hashlib
        expected = hashlib.sha256(_Big.body).hexdigest()
        jobs = [env.exec(sid, ExecRequest(command=["python3", "-c", fetch])) for _ in range(4)]
        for job in jobs:
            done = env.wait_job(job.job_id, timeout=60)
            assert done.ok and done.stdout.strip() == expected, done
    finally:
        server.shutdown()
        server.server_close()
    with loopback_server("host") as host:
        full = env.create_sandbox(SandboxSpec(network="full")).sandbox_id
        port = host.server_address[1]
        assert run(env, full, f"exec 3<>/dev/tcp/127.0.0.1/{port}").exit_code == 0


def test_orchard_home_is_hidden_from_host_sandboxes(monkeypatch):
    home = Path(tempfile.mkdtemp(prefix="orchard-home-", dir="/var/tmp"))
    try:
        monkeypatch.setenv("ORCHARD_HOME", str(home))
        (home / "secret.txt").write_text("key")
        with EnvManager("local") as env:
            sid = env.create_sandbox(SandboxSpec()).sandbox_id
            assert ok(env, sid, f"ls -A {home}; echo end") == "end\n"
            assert ok(env, sid, "ls /var/tmp >/dev/null && echo visible") == "visible\n"
    finally:
        shutil.rmtree(home)


# ---- scale and cleanup -----------------------------------------------------------------------

@pytest.mark.slow
def test_a_hundred_sandboxes_then_nothing_left(tmp_path):
    env = EnvManager("local", root=str(tmp_path / "local"))
    try:
        infos = [env.create_sandbox(SandboxSpec(), wait=False) for _ in range(100)]
        infos = [env.wait_sandbox(i.sandbox_id, timeout=120) for i in infos]
        assert [i.status for i in infos] == ["ready"] * 100, [i.error for i in infos if i.error]
        jobs = [env.exec(i.sandbox_id, ExecRequest(
            command=f"sleep 6000.4242 > /dev/null 2>&1 & echo {n}", keep_background=True)) for n, i in enumerate(infos)]
        assert [env.wait_job(j.job_id, 60).stdout for j in jobs] == [f"{n}\n" for n in range(100)]
        assert len(_marked_processes("6000.4242")) == 100
        pids = [int(i.details[k]) for i in infos for k in ("runner_pid", "bwrap_pid")]
        dirs = [d for i in infos for d in i.details["cgroups"].split(",") if d]
        folders = [Path(i.details["folder"]) for i in infos]
        assert len(env.backend.resources()) == 100
    finally:
        env.close()
    assert not any(f.exists() for f in folders)
    assert not any(os.path.exists(d) for d in dirs)
    assert all(_gone(p) for p in pids)
    assert _marked_processes("6000.4242") == []
    assert list(env.backend.root.iterdir()) == []


@pytest.mark.slow
def test_kill_9_of_the_owner_then_gc_leaves_nothing(env):
    orphan = make_orphan(env.backend, {})
    folder = env.backend.root / orphan
    meta = local._read_meta(folder)
    assert meta["owner"] != env.owner and meta["cgroups"] == [
        d for d in meta["cgroups"] if os.path.isdir(d)]
    assert _gone(meta["bwrap_pid"]) and _gone(meta["runner_pid"]), \
        "the sandbox outlived its owner (--die-with-parent)"
    assert orphan in [r.sandbox_id for r in env.backend.resources()]
    assert orphan in env.gc()
    assert not folder.exists()
    assert not any(os.path.exists(d) for d in meta["cgroups"])
    env.backend.destroy(orphan)  # idempotent


@pytest.mark.docker
@pytest.mark.slow
def test_image_names_from_the_docker_engine_and_root_filesystem_folders(env, tmp_path, monkeypatch):
    """A docker image name runs on the local backend from the engine's copy, exported once; the
    exported folder is itself a usable image."""
    from orchard_cli.env.images import ensure_base_image

    monkeypatch.setenv("ORCHARD_HOME", str(tmp_path / "home"))
    image = ensure_base_image()
    for _ in range(2):
        info = env.create_sandbox(SandboxSpec(image=image, workdir="/home/agent/work"))
        out = ok(env, info.sandbox_id, "cat /etc/debian_version; pwd; python3 -c 'print(1)'")
        assert out.splitlines()[1:] == ["/home/agent/work", "1"], out
        assert run(env, info.sandbox_id, "touch /etc/x").exit_code != 0
    exported = list((tmp_path / "home").rglob("images/*/rootfs"))
    assert len(exported) == 1, exported  # exported once, then reused
    info = env.create_sandbox(SandboxSpec(image=str(exported[0])))
    assert ok(env, info.sandbox_id, "test -f /etc/debian_version && echo yes") == "yes\n"


def test_image_name_aliases(env, monkeypatch):
    monkeypatch.setenv("ORCHARD_LOCAL_IMAGES", "python:3.11-slim=host, bad=")
    info = env.create_sandbox(SandboxSpec(image="python:3.11-slim"))
    assert ok(env, info.sandbox_id, "test -x /usr/bin/python3 && echo host") == "host\n"
    with pytest.raises(UsageError, match="ORCHARD_LOCAL_IMAGES"):
        env.create_sandbox(SandboxSpec(image="bad"))
