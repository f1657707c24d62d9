"""The docker backend: one container per sandbox on the local Docker engine.

Each sandbox is a container named `orchard-<id>`, labelled with its id, owner and expiry, running
`sleep infinity` under `--init` with a read-only root filesystem, made with `--rm` (auto_remove):
destroying one kills it, and the engine removes it as it removes a `docker run --rm` container
that has exited, even when the client is gone by then. Where the engine runs on this host, in
this pid namespace, and this process may signal the container, destroy kills it itself
(`pidkill`) and returns once every process in it is dead, without waiting for the engine's ~35 ms
of bookkeeping after the exit; elsewhere it asks the engine to kill it. Its workspace (spec.workdir) and
/tmp are host folders under `ORCHARD_HOME/env/docker/<id>/` bound into it, so files are read and
written host-side; files the image already has at the workdir (a SWE repository at /testbed) are
copied into the workspace folder at creation. Limits are the engine's (cpu, memory = memory+swap,
pids). Networks 'none', 'drop' and 'proxy' have no interface but loopback; with 'proxy' the runner
inside listens on 127.0.0.1:3128 and relays to a Unix socket in the control folder whose host end
(`local_proxy`) reaches the one proxy URL. Each of spec.forwards is one more such listener, at its
own port, relayed to its own host:port. Both need the runner (python3 in the image).

Commands run through the sandbox runner the local backend uses too (`local_runner.py`), started
with the container when the image has python3; it connects back once to a socket in the
bind-mounted control folder (`runner_channel.RunnerChannel`, the local backend's too). The first
sandbox of an image waits for it at creation (it tells whether the image has python3 and bash);
later ones are ready once their container runs, and their first command waits for the runner's
hello (~8 ms of interpreter start, spent while the caller goes on), so that no command runs
before the runner has taken the socket. A command costs a fork in the container,
not an engine round trip (~2 ms against ~55 ms). Images without python3 (or
`exec_mode='engine'`) use the engine's exec API, with the same timeout, kill and truncation rules.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shlex
import shutil
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from orchard_cli.env import cgroups, docker_services, netdrop, nosuid, pidkill, runner_boot
from orchard_cli.env.docker_files import HostTree
from orchard_cli.env.docker_io import RawResult, engine_exec, extract_workdir
from orchard_cli.env.runner_channel import RunnerChannel
from orchard_cli.env.images import docker_client, ensure_base_image
from orchard_cli.env.local_proxy import (ProxyForwarder, check_listening, close_relays, open_relays,
                                          sandbox_proxy_url)
from orchard_cli.env.models import (
    MAX_FILE_BYTES,
    SANDBOX_PROXY_PORT,
    TRUNCATION_MARKER,
    ExecRequest,
    ExecResult,
    PtyRequest,
    Resource,
    SandboxInfo,
    SandboxSpec,
    check_file_mode,
    check_file_size,
)
from orchard_cli.errors import InfraError, LimitError, NotFoundError, SandboxError, UsageError
from orchard_cli.home import orchard_home, state_dir

CTL = "/run/orchard"          # the control folder inside the container
PROXY_PORT = SANDBOX_PROXY_PORT  # where the sandbox reaches its proxy (its own loopback)
LABEL = "orchard"
RUNNER_WAIT = 30.0            # seconds the runner may take to come up
DOCKER_MEMORY_MIN = 6 * 1024 * 1024  # the engine refuses a smaller memory limit
# The container's main process (under docker-init): start the runner, which connects back to the
# control socket, note what the image offers, then sleep, ignoring the signals a stray `pkill` or
# `kill -TERM -1` in the sandbox would send (the container lives as long as this sleep does).


@functools.cache
def _start_script() -> str:
    """The container's main process (see above): the runner from code this process compiled when
    the container's Python is the same interpreter, else from its source (runner_boot)."""
    boot = shlex.quote(runner_boot.program(CTL, _compiled()))
    return f"""#!/bin/sh
[ -x /bin/bash ] && : >{CTL}/has-bash
if [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; else py=$(command -v python3); fi
if [ -n "$py" ]; then
  ("$py" -I -S -c {boot} {CTL}/ctl.sock </dev/null >{CTL}/runner.log 2>&1 &)  # init reaps it
else
  : >{CTL}/no-runner
fi
trap '' HUP INT QUIT TERM USR1 USR2
exec sleep infinity
"""


@functools.cache
def _compiled() -> "runner_boot.Compiled":
    """The runner as this process compiles it, once."""
    return runner_boot.here()


def _host_dir(sandbox_id: str) -> Path:
    return orchard_home() / "env" / "docker" / sandbox_id


def _usage_or_infra(exc: Exception, what: str) -> Exception:
    import docker.errors

    if isinstance(exc, docker.errors.APIError) and exc.is_client_error():
        reason = (exc.explanation or str(exc)).strip().splitlines()[0]
        return UsageError(f"docker refused to {what}: {reason}")
    return SandboxError(f"docker could not {what}: {exc}")


class DockerSandbox:
    def __init__(self, backend: "DockerBackend", info: SandboxInfo, container_id: str,
                 root: Path, channel: RunnerChannel | None, env: dict[str, str], shell: str,
                 owner: tuple[int, int] | None = None) -> None:
        self.backend = backend
        self.info = info
        self.container_id = container_id
        self.root = root
        self.channel = channel
        """Its runner's channel; not yet connected while the runner starts (`_connected`)."""
        self._handshake = threading.Lock()
        self.env = env
        self.shell = shell
        spec = info.spec
        roots = {spec.workdir: root / "workspace", "/tmp": root / "tmp"}
        roots.update({m.target.rstrip("/"): Path(m.source) for m in spec.mounts})
        self.tree = HostTree(roots, frozenset(m.target.rstrip("/") for m in spec.mounts
                                              if m.read_only), owner)
        self._memory: list[str] | None = None

    # ---- exec ---------------------------------------------------------------------------------

    def exec(self, request: ExecRequest) -> ExecResult:
        stdin = request.stdin.encode() if request.stdin is not None else None
        memory = self._memory_cgroups()
        ooms = cgroups.oom_kills(memory)
        raw = self._run(request.command, env=request.env, cwd=request.cwd or self.info.spec.workdir,
                        stdin=stdin, timeout=request.timeout_seconds, limit=request.output_limit,
                        keep=request.keep_background)
        killed = (raw.signal == 9 or raw.exit_code == 137) and cgroups.oom_kills(memory) > ooms
        return _result(raw, oom_killed=killed)

    def _memory_cgroups(self) -> list[str]:
        """The container's memory cgroup on this host (for its out-of-memory kill count)."""
        if self._memory is None:
            try:
                pid = int(self.backend.api.inspect_container(self.container_id)["State"]["Pid"])
                self._memory = cgroups.memory_dirs_of(pid) if pid else []
            except Exception:  # no count: oom_killed stays False
                self._memory = []
        return self._memory

    def _connected(self) -> RunnerChannel | None:
        """The runner's channel once it has said hello: a sandbox of an image known to run the
        runner is ready when its container runs, while the runner's interpreter starts, and its
        first command waits here for the hello (no command runs in the sandbox before it, so none
        can take the runner's place on the socket). None without a runner."""
        channel = self.channel
        if channel is None or channel.ready or channel.dead:
            return channel
        with self._handshake:
            if not channel.ready and not channel.dead and self.channel is not None:
                started = False
                try:
                    started = self.backend._wait_runner(self.container_id, channel, self.root / "ctl",
                                                        self.info.spec, {})
                finally:
                    if not started:  # no runner (or not in time): the engine runs what follows
                        channel.close()
                        self.channel = None
        return self.channel

    def _run(self, command: str | list[str], *, env: dict[str, str], cwd: str,
             stdin: bytes | None, timeout: float, limit: int, keep: bool = False) -> RawResult:
        channel = self._connected()
        if channel is None or channel.dead or self.backend.exec_mode == "engine":
            return engine_exec(self.backend.api, self.container_id, command, env=env, cwd=cwd,
                               stdin=stdin, timeout=timeout, limit=limit,
                               ctl_host=self.root / "ctl", ctl_sandbox=CTL)
        started = time.monotonic()
        argv = [self.shell, "-c", command] if isinstance(command, str) else list(command)
        reply = channel.call({"op": "exec", "argv": argv, "cwd": cwd, "env": {**self.env, **env},
                              "stdin": stdin, "timeout": float(timeout), "limit": int(limit),
                              "keep": keep},
                             timeout=timeout + 60)
        if reply.get("error") and "exit" not in reply:  # the runner is gone or did not answer
            return RawResult(exit_code=None, error=reply["error"],
                             duration=time.monotonic() - started)
        error = reply.get("error")
        return RawResult(exit_code=reply.get("exit"),
                         stdout=base64.b64decode(reply.get("out") or ""),
                         stderr=base64.b64decode(reply.get("err") or ""),
                         stdout_dropped=reply.get("out_dropped", 0),
                         stderr_dropped=reply.get("err_dropped", 0),
                         timed_out=bool(reply.get("timed_out")), signal=reply.get("signal"),
                         leftovers=reply.get("leftovers"),
                         duration=reply.get("duration") or time.monotonic() - started,
                         error=base64.b64decode(error).decode(errors="replace") if error else None)

    def open_pty(self, request: PtyRequest) -> Any:
        channel = self._connected()
        if channel is None or channel.dead:
            raise UsageError(f"terminal sessions need the sandbox runner, which needs python3 in the image "
                             f"{self.info.spec.image}")
        return channel.open_stream({"op": "pty", "argv": list(request.cmd),
                                    "cwd": request.cwd or self.info.spec.workdir,
                                    "env": {**self.env, **request.env}, "rows": request.rows,
                                    "cols": request.cols})

    # ---- files --------------------------------------------------------------------------------

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        where = self.tree.locate(path)
        if where is not None:
            return self.tree.write(*where, data, mode, path)
        # The path leads, through a symlink, elsewhere in the container: let it decide.
        check_file_mode(mode)
        raw = self._run(["/bin/sh", "-c", 'mkdir -p "$(dirname "$1")" && cat >"$1" && chmod "$2" "$1"',
                         "orchard", path, format(mode, "o")],
                        env={}, cwd="/", stdin=data, timeout=120, limit=1 << 16)
        if raw.exit_code != 0:
            raise UsageError(f"cannot write {path!r}: "
                             f"{(raw.error or raw.stderr.decode(errors='replace')).strip()}")

    def read_file(self, path: str) -> bytes:
        where = self.tree.locate(path)
        if where is not None:
            return self.tree.read(*where, path)
        raw = self._run(["cat", "--", path], env={}, cwd="/", stdin=None, timeout=120,
                        limit=MAX_FILE_BYTES)
        if raw.stdout_dropped:
            check_file_size(MAX_FILE_BYTES + raw.stdout_dropped, repr(path))
        if raw.exit_code != 0:
            message = (raw.error or raw.stderr.decode(errors="replace")).strip()
            if "No such file" in message:
                raise NotFoundError(f"no file {path!r} in the sandbox")
            raise UsageError(f"cannot read {path!r}: {message}")
        return raw.stdout

    def destroy(self) -> None:
        self.backend.destroy(self.info.sandbox_id)


def _log_tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-600:].strip() or "no output"
    except OSError:
        return "no log"


def _text(data: bytes, dropped: int) -> tuple[str, bool]:
    text = data.decode("utf-8", errors="replace")
    if dropped:
        return text + TRUNCATION_MARKER.format(dropped=dropped), True
    return text, False


def _result(raw: RawResult, oom_killed: bool = False) -> ExecResult:
    stdout, out_cut = _text(raw.stdout, raw.stdout_dropped)
    stderr, err_cut = _text(raw.stderr, raw.stderr_dropped)
    return ExecResult(exit_code=None if raw.timed_out or raw.error else raw.exit_code,
                      stdout=stdout, stderr=stderr, stdout_truncated=out_cut,
                      stderr_truncated=err_cut, timed_out=raw.timed_out,
                      duration_seconds=raw.duration, error=raw.error, oom_killed=oom_killed,
                      leftover_processes=raw.leftovers)


class DockerBackend:
    name: ClassVar[str] = "docker"
    unsupported: frozenset[str] = frozenset()

    def __init__(self, exec_mode: str = "auto", client=None) -> None:
        """exec_mode: 'auto' (the runner in the container when the image has python3) or
        'engine' (always the engine's exec API)."""
        if exec_mode not in ("auto", "engine"):
            raise UsageError(f"exec_mode must be 'auto' or 'engine', not {exec_mode!r}")
        self.unsupported = frozenset({"network_drop"} if netdrop.available() else ())
        self.exec_mode = exec_mode
        self.options = {"exec_mode": exec_mode}  # how to make an equal backend in another process
        self._client = client
        self._lock = threading.Lock()
        self._live: dict[str, tuple[RunnerChannel | None, list[ProxyForwarder]]] = {}
        """Sandboxes made here -> their runner channel and the host ends of their relayed ports."""
        self._made: dict[str, str] = {}
        """Sandboxes made by this backend object -> their workdir: destroyed without asking the engine."""
        self._serviced: set[str] = set()
        """Sandboxes made here with side services (removed with them by destroy)."""
        self._empty: set[tuple[str, str]] = set()
        """(image id, workdir) pairs where the image holds nothing to copy into the workspace."""
        self._runs_runner: dict[str, tuple[str, bool]] = {}
        """Images whose first sandbox here started the runner -> its shell, whether protected."""
        self._ncpu: int | None = None
        self._reaped: dict[str, tuple[str, float]] = {}
        """Sandboxes destroyed here whose processes are dead -> their container's id, and when
        (oldest first): the engine may still call them running for the ms its bookkeeping takes."""
        self._reaped_lock = threading.Lock()

    @property
    def client(self):
        with self._lock:
            if self._client is None:
                self._client = docker_client()
            return self._client

    @property
    def api(self):
        return self.client.api

    # ---- create -------------------------------------------------------------------------------

    def _image(self, spec: SandboxSpec) -> tuple[str, dict]:
        """The image's name and the engine's description of it (pulled when missing)."""
        name = ensure_base_image() if spec.image == "host" else spec.image
        api = self.api  # first: a missing SDK or engine is reported as such
        import docker.errors

        try:
            return name, api.inspect_image(name)
        except docker.errors.ImageNotFound:
            if spec.image == "host":
                raise
        try:
            repo, _, tag = spec.image.rpartition(":") if ":" in spec.image.split("/")[-1] \
                else (spec.image, "", "latest")
            self.api.pull(repo, tag=tag)
            attrs = self.api.inspect_image(spec.image)
        except Exception as exc:
            reason = str(getattr(exc, "explanation", None) or exc).strip().splitlines()[0][:200]
            raise UsageError(f"image {spec.image} does not exist locally and could not be pulled: "
                             f"{reason}", hint="build it with `docker build`, FROM orchard's base image "
                             "(`python -m orchard_cli.env.images` makes that one)") from None
        return spec.image, attrs

    def check(self, spec: SandboxSpec) -> None:
        """Numbers the engine refuses, before anything is made (422): memory below its 6 MiB."""
        if spec.memory_bytes < DOCKER_MEMORY_MIN:
            raise LimitError(f"memory {spec.memory} is below the {DOCKER_MEMORY_MIN} bytes (6Mi) docker allows")

    def create(self, sandbox_id: str, spec: SandboxSpec, owner: str, expires_at: float) -> DockerSandbox:
        image, attrs = self._image(spec)  # first: reports a missing SDK, engine or image
        import docker.errors
        from docker.types import Mount

        root = state_dir("env", "docker", sandbox_id)
        (root / "owner.json").write_text(json.dumps({"owner": owner, "expires_at": expires_at}))
        for sub in ("workspace", "tmp", "ctl"):
            (root / sub).mkdir(exist_ok=True)
        for sub in ("workspace", "tmp"):  # no setuid program made inside is one on the host (nosuid.py)
            nosuid.seal(root / sub)
        os.chmod(root / "tmp", 0o1777)
        os.chmod(root / "ctl", 0o1777)  # the image's user may not be root
        runner_boot.place(root / "ctl", _compiled())
        (root / "ctl" / "start.sh").write_text(_start_script())
        channel = RunnerChannel(root / "ctl" / "ctl.sock", lambda: _log_tail(root / "ctl" / "runner.log"),
                                socket_mode=0o666)  # the runner runs as the image's user
        env = dict(spec.env)
        self._live[sandbox_id] = (channel, [])  # closed by destroy if what follows fails
        relays, listen = open_relays(spec, root / "ctl", CTL, PROXY_PORT)
        self._live[sandbox_id] = (channel, relays)
        config: dict = {"listen": listen} if listen else {}
        if spec.network == "proxy":
            env["ORCHARD_PROXY_URL"] = sandbox_proxy_url(spec.proxy_url, PROXY_PORT)
        mounts = [Mount(spec.workdir, str(root / "workspace"), type="bind"),
                  Mount("/tmp", str(root / "tmp"), type="bind"),
                  Mount(CTL, str(root / "ctl"), type="bind")]
        mounts += [Mount(m.target, m.source, type="bind", read_only=m.read_only) for m in spec.mounts]
        labels = {**spec.labels, f"{LABEL}.managed": "true", f"{LABEL}.sandbox_id": sandbox_id,
                  f"{LABEL}.auto_remove": "true",
                  f"{LABEL}.owner": owner, f"{LABEL}.expires_at": repr(expires_at),
                  f"{LABEL}.host_dir": str(root), f"{LABEL}.workdir": spec.workdir}
        name = f"orchard-{sandbox_id}"
        self._removed(sandbox_id, 30)  # the id was destroyed here a moment ago: its name is free
        network, joined = "bridge" if spec.network == "full" else "none", None
        if spec.services:  # first, on a network of the sandbox's own (docker_services.py)
            self._serviced.add(sandbox_id)
            side = {k: v for k, v in labels.items() if k != f"{LABEL}.auto_remove"}
            network = docker_services.start(self.api, sandbox_id, spec, side, self._cpus())
            joined = self.api.create_networking_config(
                {network: self.api.create_endpoint_config(aliases=["main"])})
        try:
            host_config = self.api.create_host_config(
                init=True, auto_remove=True, read_only=not spec.writable_root, mounts=mounts,
                network_mode=network,
                nano_cpus=int(min(spec.cpu, self._cpus()) * 1e9),
                mem_limit=spec.memory_bytes, memswap_limit=spec.memory_bytes,
                pids_limit=spec.pids)
            container = self.api.create_container(  # no health check: the engine runs nothing in it
                image, entrypoint=["/bin/sh", f"{CTL}/start.sh"], name=name, labels=labels,
                environment=env, working_dir=spec.workdir, host_config=host_config, detach=True,
                healthcheck={"test": ["NONE"]}, networking_config=joined)
            cid = container["Id"]
            empty = (attrs["Id"], spec.workdir)  # an image known to hold nothing there: no probe
            prepopulated = empty not in self._empty and self._prepopulate(
                image, sandbox_id, labels, spec.workdir, root / "workspace")
            if not prepopulated:
                self._empty.add(empty)
            self._made[sandbox_id] = spec.workdir  # its probe is gone: destroy need not look for it
            self.api.start(cid)
        except docker.errors.APIError as exc:
            raise _usage_or_infra(exc, f"run a container from {image}") from None
        if spec.network == "drop":
            self._drop_traffic(cid, name)
        known = self._runs_runner.get(attrs["Id"])
        if known is not None and not config and self.exec_mode == "auto":
            has_runner, (shell, protected) = True, known  # its hello is awaited by the first command
        else:
            has_runner = self._wait_runner(cid, channel, root / "ctl", spec, config)
            if not has_runner:
                channel.close()
                self._live[sandbox_id] = (None, relays)
            shell = "/bin/bash" if (root / "ctl" / "has-bash").exists() else "/bin/sh"
            protected = bool(channel.hello.get("protected"))
            if has_runner:
                self._runs_runner[attrs["Id"]] = (shell, protected)
        config_env = _container_config(attrs.get("Config") or {}, env, cid)
        details = {"container_id": cid[:12], "container": name, "image": image,
                   "host_dir": str(root),
                   "exec": "runner" if has_runner and self.exec_mode == "auto" else "engine",
                   "root": "writable" if spec.writable_root else "read-only",
                   "runner_protected": str(protected).lower()}
        info = SandboxInfo(sandbox_id=sandbox_id, backend=self.name, status="ready", spec=spec,
                           isolation="docker", limits="docker", expires_at=expires_at,
                           details=details)
        sandbox = DockerSandbox(self, info, cid, root, channel if has_runner else None,
                                _process_env(config_env), shell)
        if config_env.get("User") not in (None, "", "0", "root", "0:0"):
            self._adopt_user(sandbox, config_env["User"], prepopulated)
        return sandbox

    def _adopt_user(self, sandbox: DockerSandbox, user: str, prepopulated: bool) -> None:
        """The image runs as `user`, not root: host-side writes take its ids, and an empty
        workspace becomes its own."""
        raw = sandbox._run(["/bin/sh", "-c", "id -u; id -g"], env={}, cwd="/", stdin=None,
                           timeout=30, limit=1024)
        try:
            uid, gid = (int(x) for x in raw.stdout.split())
        except ValueError:
            raise SandboxError(f"cannot tell the ids of the image's user {user!r}: "
                               f"{raw.error or raw.stderr.decode(errors='replace')}") from None
        sandbox.tree.owner = (uid, gid)
        if not prepopulated and os.geteuid() == 0:
            os.chown(sandbox.root / "workspace", uid, gid)

    def _cpus(self) -> int:
        if self._ncpu is None:
            self._ncpu = int(self.client.info().get("NCPU") or os.cpu_count() or 1)
        return self._ncpu

    def _prepopulate(self, image: str, sandbox_id: str, labels: dict[str, str], workdir: str,
                     dest: Path) -> bool:
        """Copy what the image holds at `workdir` into the (empty) workspace folder; False when
        it holds nothing there. The archive
        comes from a probe container without mounts (~20 ms; the sandbox's own container would
        show its bind mount there instead)."""
        import docker.errors

        probe = self.api.create_container(image, entrypoint=["/bin/true"], labels=labels,
                                          name=f"orchard-{sandbox_id}-probe", network_disabled=True)
        try:
            try:
                stream, _ = self.api.get_archive(probe["Id"], workdir)
            except docker.errors.NotFound:
                return False
            extract_workdir(stream, workdir, dest)
            return True
        finally:
            self.api.remove_container(probe["Id"], force=True)

    def _wait_runner(self, cid: str, channel: RunnerChannel, ctl: Path, spec: SandboxSpec,
                     config: dict) -> bool:
        import docker.errors

        started = time.monotonic()
        while time.monotonic() < started + RUNNER_WAIT:
            if channel.dead:
                raise SandboxError(f"the sandbox is gone ({channel.dead})")
            if channel.accept(config, 0.005):
                check_listening(channel.hello)
                return True
            if (ctl / "no-runner").exists():
                if spec.network == "proxy" or spec.forwards:
                    what = "network='proxy'" if spec.network == "proxy" else "spec.forwards"
                    raise UsageError(f"{what} needs python3 in the image {spec.image}")
                return False
            if time.monotonic() - started > 2:  # slow: is the container still there at all?
                try:
                    state = self.api.inspect_container(cid)["State"]
                except docker.errors.NotFound:  # exited, and the engine removed it (auto_remove)
                    raise SandboxError(f"the sandbox container exited at start and is gone: "
                                       f"{_log_tail(ctl / 'runner.log')}",
                                       hint=f"the image {spec.image} needs /bin/sh") from None
                if not state.get("Running"):
                    logs = self.api.logs(cid, tail=3).decode(errors="replace").strip()
                    raise SandboxError(f"the sandbox container exited at start (exit "
                                       f"{state.get('ExitCode')}): {logs or 'no output'}",
                                       hint=f"the image {spec.image} needs /bin/sh")
                time.sleep(0.5)
        raise SandboxError(f"the sandbox runner did not start within {RUNNER_WAIT:.0f}s: "
                           f"{_log_tail(ctl / 'runner.log')}")

    # ---- list and destroy -----------------------------------------------------------------------

    def resources(self) -> list[Resource]:
        found: dict[str, Resource] = {}
        with self._reaped_lock:
            reaped = dict(self._reaped)
        for c in self.api.containers(all=True, filters={"label": f"{LABEL}.managed=true"}):
            labels = c.get("Labels") or {}
            sid = labels.get(f"{LABEL}.sandbox_id")
            if not sid:
                continue
            if labels.get(f"{LABEL}.auto_remove") == "true" and (
                    c.get("State") in ("exited", "removing") or reaped.get(sid, ("",))[0] == c["Id"]):
                continue  # stopped (or its processes killed here): the engine is removing it
            try:
                expires = float(labels.get(f"{LABEL}.expires_at") or 0)
            except ValueError:
                expires = 0.0
            found[sid] = Resource(sandbox_id=sid, owner=labels.get(f"{LABEL}.owner", ""),
                                  expires_at=expires,
                                  detail=f"container {c['Id'][:12]} {c.get('State', '')}")
        base = orchard_home() / "env" / "docker"
        for folder in sorted(base.iterdir()) if base.is_dir() else []:
            if folder.name in found or not folder.is_dir():
                continue
            try:
                meta = json.loads((folder / "owner.json").read_text())
            except (OSError, ValueError):
                if time.time() - folder.stat().st_mtime < 60:
                    continue  # being created right now; owner.json is on the way
                meta = {}
            found[folder.name] = Resource(sandbox_id=folder.name, owner=meta.get("owner", ""),
                                          expires_at=float(meta.get("expires_at") or 0),
                                          detail=f"folder {folder} without a container")
        return list(found.values())

    def destroy(self, sandbox_id: str) -> None:
        api = self.api
        import docker.errors

        if "/" in sandbox_id or sandbox_id in ("", ".", ".."):
            raise UsageError(f"invalid sandbox id {sandbox_id!r}")
        channel, relays = self._live.pop(sandbox_id, (None, []))
        workdir = self._made.pop(sandbox_id, None)
        made_here = workdir is not None  # its probe is gone: removed when it was made
        name = f"orchard-{sandbox_id}"
        folders = {_host_dir(sandbox_id)}
        try:
            if workdir is None:  # not made here (gc, another process): its labels say where it lives
                labels = self.api.inspect_container(name)["Config"].get("Labels") or {}
                other = Path(labels.get(f"{LABEL}.host_dir", ""))
                if other.name == sandbox_id and other.parent.name == "docker":
                    folders.add(other)  # created under another ORCHARD_HOME
                workdir = labels.get(f"{LABEL}.workdir", "/workspace")
            if os.geteuid() != 0:
                self._scrub(name, workdir)
            if not (made_here and (self._reap(name, sandbox_id) or self._kill(name))):
                self.api.remove_container(name, force=True, v=True)  # perhaps without auto_remove
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: not running (being removed), or removal in progress
                raise InfraError(f"docker could not remove {name}: {exc}") from exc
        if not made_here:  # a crash while it was made may have left its probe
            try:
                self.api.remove_container(f"{name}-probe", force=True)
            except docker.errors.APIError:
                pass
        if sandbox_id in self._serviced or not made_here:  # its side services and their network
            self._serviced.discard(sandbox_id)
            docker_services.remove(self.api, sandbox_id)
        if channel is not None:
            channel.close()
        close_relays(relays)
        for folder in folders:
            for sub in ("workspace", "tmp"):
                nosuid.release(Path(folder) / sub)
            shutil.rmtree(folder, ignore_errors=True)

    def _reap(self, name: str, sandbox_id: str) -> bool:
        """Kill a running container made here from this host (pidkill): True once every process
        in it is dead; the engine then removes it (auto_remove) without this process waiting for
        its bookkeeping. False when that cannot be done here (the engine elsewhere, not root)."""
        state = self.api.inspect_container(name)
        running = state["State"].get("Running") and not state["State"].get("Paused")  # frozen: no death
        if not (running and pidkill.kill_container(int(state["State"].get("Pid") or 0), state["Id"],
                                                   timeout=5)):
            return False
        now = time.monotonic()
        with self._reaped_lock:
            self._reaped.pop(sandbox_id, None)
            self._reaped[sandbox_id] = (state["Id"], now)
            for sid, (_, when) in list(self._reaped.items()):
                if now - when < 60:
                    break
                self._reaped.pop(sid)  # long removed (were it not, it is listed again)
        return True

    def _removed(self, sandbox_id: str, within: float) -> None:
        """Wait (at most `within` s) until the engine has removed the container of `sandbox_id`
        that destroy killed here."""
        import docker.errors

        with self._reaped_lock:
            cid, _ = self._reaped.get(sandbox_id, ("", 0.0))
        if not cid:
            return
        try:
            self.api.wait(cid, timeout=max(within, 0.1), condition="removed")
        except docker.errors.NotFound:
            pass
        except Exception:  # not in time, or the engine unreachable: the engine removes it later
            return
        with self._reaped_lock:
            if self._reaped.get(sandbox_id, ("",))[0] == cid:
                self._reaped.pop(sandbox_id)

    def _kill(self, name: str) -> bool:
        """Kill a container made here (auto_remove: the engine removes it once it has stopped,
        as it removes a `docker run --rm` container that exits); False when it is not running
        (never started: only a removal removes it)."""
        import docker.errors

        try:
            self.api.kill(name)  # SIGKILL: returns once the container has stopped
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                return False
            raise
        return True

    def _drop_traffic(self, cid: str, name: str) -> None:
        """network='drop' in the container's own namespace (netdrop.py), entered through its
        init's pid: the engine must run on this host."""
        pid = int(self.api.inspect_container(cid)["State"].get("Pid") or 0)
        try:
            if not pid or not os.path.exists(f"/proc/{pid}/ns/net"):
                raise SandboxError("network='drop' needs the docker engine on this host "
                                   f"(container {name} has no process here)")
            netdrop.drop_traffic(pid)
        except BaseException:
            self.destroy(name.removeprefix("orchard-"))
            raise

    def _scrub(self, name: str, workdir: str) -> None:
        """Not root: files the sandbox made as root can only be deleted from inside."""
        try:
            run = self.api.exec_create(name, ["/bin/sh", "-c", f'rm -rf "{workdir}"/* "{workdir}"/.[!.]* '
                                       f'/tmp/* /tmp/.[!.]* {CTL}/*'], user="0")
            self.api.exec_start(run["Id"])
        except Exception:
            pass

    def close(self) -> None:
        for sandbox_id in list(self._live):
            channel, relays = self._live.pop(sandbox_id, (None, []))
            if channel is not None:
                channel.close()
            close_relays(relays)
        # Containers killed here may still be running in the engine's view for its bookkeeping's
        # while: wait until they are removed, so that no process after this one (`orchard env
        # down`'s gc) sees them as left behind.
        end = time.monotonic() + 30
        with self._reaped_lock:
            pending = list(self._reaped)
        for sandbox_id in pending:
            if time.monotonic() >= end:
                break
            self._removed(sandbox_id, end - time.monotonic())


def _container_config(image: dict, env: dict[str, str], cid: str) -> dict:
    """What the engine's inspect of the new container would say of its Env, Hostname and User:
    the image's environment with ours over it (as the engine merges them), the id's first 12
    characters, the image's user. One round trip less per sandbox."""
    merged = dict(item.split("=", 1) for item in image.get("Env") or [] if "=" in item)
    merged.update(env)
    return {"Env": [f"{k}={v}" for k, v in merged.items()], "Hostname": cid[:12], "User": image.get("User")}


def _process_env(config: dict) -> dict[str, str]:
    """The environment `docker exec` would give a command: the container's, plus HOSTNAME and HOME."""
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.setdefault("HOSTNAME", config.get("Hostname") or "")
    if config.get("User") in (None, "", "0", "root"):
        env.setdefault("HOME", "/root")
    return env
