"""The `local` backend: sandboxes on this machine with bubblewrap, cgroups and one runner each.

Each sandbox is a folder `state_dir("env", "local")/<id>/` holding `meta.json` (id, owner, expiry,
pids, cgroups: enough for `resources()` and `destroy()` to handle it from any process), `work/`
(bound at the workdir), `tmp/` (bound at /tmp) and `run/` (the runner's control socket and the
relayed ports' sockets, bound read-only at /.orchard). Bwrap drops every capability. Inside, the root is a
read-only copy of the image ('host' = this machine's system folders only, with what in them only
root may read covered: see `local_bwrap.py`; or a directory holding a root filesystem), every
namespace is unshared (network too, unless network='full'), ORCHARD_HOME is hidden, and only the
workdir, /tmp and read-write mounts are writable. One long-lived runner (`local_runner.py`)
per sandbox spawns its commands, so an exec costs a fork rather than a bwrap start. Limits
(memory, pids, cpu) come from cgroups (`cgroups.py`), reported in `SandboxInfo.limits`.

network='proxy': the runner listens on 127.0.0.1:<port> inside the sandbox's own network namespace
(a free port, ORCHARD_PROXY_URL says which) and forwards each connection over a bound Unix socket
to a thread here, which connects to proxy_url. spec.forwards work the same way, each at its own
fixed port relayed to its own host:port (`local_proxy.py`); the runner binds those first, so the
proxy's free port is never one of them. Nothing else is reachable, not even the host's loopback.

Without bwrap there is no isolation, and we never pretend otherwise: a warning is issued once,
creating a sandbox raises SandboxError with the install hint, unless ORCHARD_ALLOW_NO_ISOLATION=1,
in which case commands run on the host (isolation='none', every capability listed unsupported,
spec.forwards refused) with cwd under the workdir or /tmp mapped to the sandbox's host folders;
absolute sandbox paths written inside commands are not rewritten.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

from orchard_cli.env import cgroups, nosuid, runner_boot, limits, netdrop
from orchard_cli.env.base import CAPABILITIES
from orchard_cli.env.io_loop import io_loop
from orchard_cli.env.local_spawn import OutputTail, spawn
from orchard_cli.env.runner_channel import RunnerChannel
from orchard_cli.env.local_bwrap import bwrap_argv, image_root, in_image, runner_python
from orchard_cli.env.local_files import SandboxFiles
from orchard_cli.env.local_proxy import (ProxyForwarder, check_listening, close_relays, open_relays,
                                          sandbox_proxy_url)
from orchard_cli.env.owner import process_start_time
from orchard_cli.env.models import (
    TRUNCATION_MARKER,
    ExecRequest,
    PtyRequest,
    ExecResult,
    Resource,
    SandboxInfo,
    SandboxSpec,
)
from orchard_cli.errors import LimitError, SandboxError, UsageError
from orchard_cli.home import orchard_home, state_dir


def task_data() -> list[Path]:
    """orchard's bundled task folders (their tests, gold solutions and checks): hidden from 'host'
    sandboxes, which show /usr and /opt, where a system install keeps them."""
    import importlib.util

    spec = importlib.util.find_spec("orchard_cli.tasks")
    return [Path(p) / "data" for p in (spec.submodule_search_locations or [])] if spec else []

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READY_TIMEOUT = 30.0
_warned = False
def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _text(data: str, dropped: int) -> str:
    text = base64.b64decode(data).decode("utf-8", "replace") if data else ""
    return text + TRUNCATION_MARKER.format(dropped=dropped) if dropped else text


class LocalSandbox:
    def __init__(self, backend: "LocalBackend", info: SandboxInfo, folder: Path, shell: str,
                 channel: RunnerChannel, cgroup_dirs: list[str], relays: list[ProxyForwarder],
                 proc: subprocess.Popen) -> None:
        self.info = info
        self.folder = folder
        self._backend = backend
        self._shell = shell
        self._channel = channel
        self._proc = proc
        self._cgroups = cgroup_dirs
        self._relays = relays
        self._files = SandboxFiles(info.spec, folder / "work", folder / "tmp")
        spec = info.spec
        self._isolated = info.isolation == "bwrap"
        home = spec.workdir if self._isolated else str(folder / "work")
        self._env = {"PATH": DEFAULT_PATH, "HOME": home, "LANG": "C.UTF-8", **spec.env}
        if not self._isolated:
            self._env["TMPDIR"] = str(folder / "tmp")
        if spec.network == "proxy":
            port = (channel.hello.get("ports") or [None])[-1]  # the proxy's comes last
            self._env["ORCHARD_PROXY_URL"] = sandbox_proxy_url(spec.proxy_url, port) \
                if self._isolated else spec.proxy_url
        self._destroyed = False

    def exec(self, request: ExecRequest) -> ExecResult:
        command = request.command
        argv = [self._shell, "-c", command] if isinstance(command, str) else list(command)
        cwd = request.cwd or self.info.spec.workdir
        env = {**self._env, **request.env}
        if not self._isolated:
            cwd = str(self._files.host_path(cwd))
            env["PWD"] = cwd
        frame = {"op": "exec", "argv": argv, "cwd": cwd, "env": env,
                 "stdin": request.stdin.encode() if request.stdin else None,
                 "timeout": float(request.timeout_seconds), "limit": int(request.output_limit),
                 "keep": bool(request.keep_background)}
        ooms = cgroups.oom_kills(self._cgroups)
        reply = self._channel.call(frame, timeout=request.timeout_seconds + 60)
        if reply.get("error") and "exit" not in reply:
            return ExecResult(exit_code=None, error=reply["error"])
        error = reply.get("error")
        killed = reply.get("signal") == signal.SIGKILL and cgroups.oom_kills(self._cgroups) > ooms
        return ExecResult(
            oom_killed=killed, leftover_processes=reply.get("leftovers"),
            exit_code=reply.get("exit"),
            stdout=_text(reply.get("out", ""), reply.get("out_dropped", 0)),
            stderr=_text(reply.get("err", ""), reply.get("err_dropped", 0)),
            stdout_truncated=reply.get("out_dropped", 0) > 0,
            stderr_truncated=reply.get("err_dropped", 0) > 0,
            timed_out=bool(reply.get("timed_out")),
            duration_seconds=reply.get("duration", 0.0),
            error=base64.b64decode(error).decode(errors="replace") if error else None)

    def open_pty(self, request: PtyRequest) -> Any:
        argv, cwd = list(request.cmd), request.cwd or self.info.spec.workdir
        env = {**self._env, **request.env}
        if not self._isolated:
            cwd = str(self._files.host_path(cwd))
        return self._channel.open_stream({"op": "pty", "argv": argv, "cwd": cwd, "env": env,
                                          "rows": request.rows, "cols": request.cols})

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._files.write(path, data, mode)

    def read_file(self, path: str) -> bytes:
        return self._files.read(path)

    def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        self._channel.dead = self._channel.dead or "sandbox destroyed"  # what waiting commands are told
        proc = self._proc
        if self._isolated:
            proc.kill()     # the pid namespace dies with bwrap
        self._channel.close()   # unisolated: the runner kills its commands and exits
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError, ValueError):
            io_loop().forget(proc.stdout.fileno())  # before its number can be reused
            proc.stdout.close()
        close_relays(self._relays)
        self._backend._forget(self.info.sandbox_id)
        self._backend._remove(self.folder, self._cgroups)


class LocalBackend:
    """Sandboxes on this machine: bubblewrap + cgroups + one runner per sandbox."""

    name = "local"
    unsupported: frozenset[str] = frozenset()

    def __init__(self, root: str | None = None) -> None:
        self.root = Path(root) if root else state_dir("env", "local")
        self.root.mkdir(parents=True, exist_ok=True)
        self.bwrap = shutil.which("bwrap")
        self.cgroups = cgroups.detect()
        unsupported = {"writable_root", "services"}  # bubblewrap binds the image read-only (see details['root'])
        if netdrop.available():
            unsupported.add("network_drop")
        if not self.bwrap:
            _warn_no_bwrap()
            unsupported |= CAPABILITIES
        if not self.cgroups.usable:
            unsupported |= {"memory_limit", "pids_limit"}
        self.unsupported = frozenset(unsupported)
        self.options = {"root": str(self.root)}
        self._live: dict[str, LocalSandbox] = {}
        self._lock = threading.Lock()
        _BACKENDS.add(self)

    # ---- lifecycle -------------------------------------------------------------------------

    def check(self, spec: SandboxSpec) -> None:
        """Numbers this host's kernel cannot honour, refused before anything is made (422)."""
        pid_max = _pid_max()
        if pid_max and spec.pids > pid_max:
            raise LimitError(f"pids {spec.pids} is above this host's pid_max ({pid_max}): the kernel cannot "
                             "honour it", hint="ask for fewer (see /proc/sys/kernel/pid_max)")

    def create(self, sandbox_id: str, spec: SandboxSpec, owner: str, expires_at: float) -> LocalSandbox:
        if spec.services:
            raise UsageError("the local backend cannot start side services (spec.services: a "
                             "docker-compose task's other containers)", hint="use the docker backend")
        if not self.bwrap and os.environ.get("ORCHARD_ALLOW_NO_ISOLATION") != "1":
            raise SandboxError(
                "bubblewrap (bwrap) is not installed, so local sandboxes cannot be isolated",
                hint="apt-get install bubblewrap (or set ORCHARD_ALLOW_NO_ISOLATION=1 to run "
                     "commands on the host without isolation)")
        image = image_root(spec.image)
        if not self.bwrap and spec.image != "host":
            raise UsageError("an image folder needs bubblewrap", hint="apt-get install bubblewrap")
        if not self.bwrap and spec.forwards:
            raise UsageError("spec.forwards need bubblewrap (a sandbox without it has no network "
                             "of its own)", hint="apt-get install bubblewrap")
        python = runner_python(image)
        folder = self.root / sandbox_id
        folder.mkdir()
        meta = {"schema_version": 1, "sandbox_id": sandbox_id, "owner": owner,
                "expires_at": expires_at, "created_at": time.time(), "backend_pid": os.getpid(),
                "image": spec.image, "workdir": spec.workdir, "labels": spec.labels,
                "isolation": "bwrap" if self.bwrap else "none", "limits": self.cgroups.label,
                "cgroups": []}
        _write_meta(folder, meta)
        for sub in ("work", "tmp"):
            (folder / sub).mkdir()
            nosuid.seal(folder / sub)  # no setuid program made inside is one on the host (nosuid.py)
        (folder / "tmp").chmod(0o1777)
        dirs = cgroups.create(self.cgroups, sandbox_id, memory=spec.memory_bytes, pids=spec.pids,
                              cpu=spec.cpu) if self.cgroups.usable else []
        meta["cgroups"] = dirs
        _write_meta(folder, meta)
        (folder / "run").mkdir()
        compiled = runner_boot.by(python) if image == Path("/") else None  # a host binary: run it here
        runner_boot.place(folder / "run", compiled)   # readable inside at /.orchard
        inside = "/.orchard" if self.bwrap else str(folder / "run")
        argv = [python, "-I", "-S", "-c", runner_boot.program(inside, compiled), f"{inside}/ctl.sock"]
        if self.bwrap:
            argv = [*bwrap_argv(self.bwrap, image, folder, spec, [self.root, orchard_home(), *task_data()]), "--",
                    *argv]
        config: dict = {"nofile": limits.started_with()}
        proc = tail = None
        relays: list[ProxyForwarder] = []
        channel = RunnerChannel(folder / "run" / "ctl.sock", lambda: tail.text() if tail else "no output")
        try:
            if self.bwrap:  # (without bwrap the sandbox shares the host's network: nothing to relay)
                relays, config["listen"] = open_relays(spec, folder / "run", "/.orchard")
            proc = spawn([*cgroups.join_prefix(dirs), *argv], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                         cwd=str(folder / "work"), env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"})
            tail = OutputTail(proc)
            if not channel.accept(config, READY_TIMEOUT, alive=lambda: proc.poll() is None):
                tail.wait(1)
                raise SandboxError(f"local sandbox did not start: {tail.text()}")
            check_listening(channel.hello)
        except BaseException:
            if proc is not None:
                proc.kill()
                proc.wait()
            channel.close()
            close_relays(relays)
            raise
        finally:
            with contextlib.suppress(OSError):
                (folder / "run" / "ctl.sock").unlink()
        grand = _children(proc.pid)
        runner_pid = (_children(grand[0]) or [0])[0] if self.bwrap and grand else proc.pid
        if spec.network == "drop" and self.bwrap:  # (without bwrap there is no namespace of its own)
            try:
                netdrop.drop_traffic(runner_pid)
            except BaseException:
                proc.kill()
                proc.wait()
                channel.close()
                close_relays(relays)
                raise
        meta.update(bwrap_pid=proc.pid, bwrap_start=process_start_time(proc.pid), runner_pid=runner_pid)
        _write_meta(folder, meta)
        shell = "/bin/bash" if in_image(image, "/bin/bash") else "/bin/sh"
        info = SandboxInfo(
            sandbox_id=sandbox_id, backend=self.name, status="ready", spec=spec,
            isolation=meta["isolation"], limits=self.cgroups.label, expires_at=expires_at,
            details={"workspace": str(folder / "work"), "folder": str(folder),
                     "runner_pid": str(runner_pid), "bwrap_pid": str(proc.pid),
                     "cgroups": ",".join(dirs), "root": "read-only",
                     "runner_protected": str(bool(channel.hello.get("protected"))).lower()})
        sandbox = LocalSandbox(self, info, folder, shell, channel, dirs, relays, proc)
        with self._lock:
            self._live[sandbox_id] = sandbox
        return sandbox

    def resources(self) -> list[Resource]:
        found = []
        for folder in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if not folder.is_dir() or folder.name.startswith("."):
                continue
            meta = _read_meta(folder)
            if meta is None and time.time() - folder.stat().st_mtime < 60:
                continue    # being created right now; its meta.json is on the way
            meta = meta or {}
            found.append(Resource(sandbox_id=folder.name, owner=meta.get("owner", ""),
                                  expires_at=meta.get("expires_at", 0.0), detail=str(folder)))
        return found

    def destroy(self, sandbox_id: str) -> None:
        if "/" in sandbox_id or sandbox_id in ("", ".", ".."):
            raise UsageError(f"invalid sandbox id {sandbox_id!r}")
        with self._lock:
            live = self._live.get(sandbox_id)
        if live is not None:
            live.destroy()
            return
        folder = self.root / sandbox_id
        meta = _read_meta(folder) or {}
        pid = meta.get("bwrap_pid")
        if pid and meta.get("bwrap_start") and process_start_time(pid) == meta["bwrap_start"]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self._remove(folder, meta.get("cgroups", []))

    def close(self) -> None:
        with self._lock:
            live = list(self._live.values())
        for sandbox in live:
            sandbox.destroy()

    def _forget(self, sandbox_id: str) -> None:
        with self._lock:
            self._live.pop(sandbox_id, None)

    @staticmethod
    def _remove(folder: Path, cgroup_dirs: list[str]) -> None:
        cgroups.kill_and_remove(cgroup_dirs)     # raises if they stay busy: keep the folder then
        for sub in ("work", "tmp"):
            nosuid.release(folder / sub)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            raise SandboxError(f"could not remove {folder}")


_BACKENDS: "weakref.WeakSet[LocalBackend]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """A script that forgot close(): its sandboxes go now, not at the next `env gc`."""
    for backend in list(_BACKENDS):
        with contextlib.suppress(Exception):
            backend.close()


def _warn_no_bwrap() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn("bubblewrap (bwrap) is not installed: local sandboxes have NO isolation "
                      "(apt-get install bubblewrap)", RuntimeWarning, stacklevel=3)


def _write_meta(folder: Path, meta: dict) -> None:
    tmp = folder / ".meta.json.tmp"
    tmp.write_text(json.dumps(meta))
    tmp.replace(folder / "meta.json")


def _read_meta(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return None


def _pid_max() -> int | None:
    """The kernel's pid_max (no process id is above it), or None where it cannot be read."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return None
