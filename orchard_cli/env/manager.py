"""EnvManager: the Orchard Env API in-process, over one backend.

It owns what every backend shares: sandbox ids, Orchard's job model (exec returns a job id at
once, or blocks with `wait`), expiry and heartbeats, the file API's path rules, apply_patch, and gc
of orphans. The HTTP service (`service.py`) is a thin skin over this class, and `EnvClient`
(`client.py`) offers the same methods over HTTP, so callers see one API either way.
"""

from __future__ import annotations

import shlex
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchard_cli.env.backends import load_backend
from orchard_cli.env.base import Sandbox, SandboxBackend
from orchard_cli.env.limits import raise_open_files
from orchard_cli.env.models import (
    CLIENT_LABEL,
    TIMEOUT_EXIT_CODE,
    FileEntry,
    FileList,
    PtyRequest,
    check_file_mode,
    ExecRequest,
    ExecResult,
    Job,
    PatchResult,
    SandboxInfo,
    SandboxSpec,
)
from orchard_cli.env.owner import current_owner, owner_alive
from orchard_cli.env.patch import apply_patch as _apply_patch
from orchard_cli.env.paths import resolve_sandbox_path
from orchard_cli.errors import InfraError, NotFoundError, OrchardError, UsageError

LIST_SCRIPT = (  # tab-separated kind, size, mtime, name per entry; POSIX sh with GNU or busybox stat
    '[ -e "$1" ] || exit 44; [ -d "$1" ] || exit 45; cd "$1" || exit 45; '
    'for f in * .[!.]* ..?*; do [ -e "$f" ] || [ -L "$f" ] || continue; '
    'stat -L -c "%F\t%s\t%Y\t%n" -- "$f" 2>/dev/null || printf "file\t0\t0\t%s\\n" "$f"; done')
DEFAULT_HEARTBEAT_TIMEOUT = 180.0
"""A sandbox that has sent a heartbeat and has no heartbeat_timeout of its own is reaped after
this many seconds without another (the published server's rule); one that never sent any is not."""
# Finished jobs are kept this long for GET /jobs/{id}, then forgotten.
JOB_RETENTION_SECONDS = 3600


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class _Entry:
    """A tracked sandbox: its info, the backend object once ready, and a ready event."""

    def __init__(self, info: SandboxInfo) -> None:
        self.info = info
        self.sandbox: Sandbox | None = None
        self.error: OrchardError | None = None
        self.ready = threading.Event()
        self.lock = threading.Lock()


def login_shell_command(command: str | list[str]) -> list[str]:
    """A command line run as the published API's `login_shell` runs it: bash as a login shell
    that also reads ~/.bashrc (not interactive: no job-control noise on stderr)."""
    line = command if isinstance(command, str) else shlex.join(command)
    return ["bash", "--login", "-c", f"if [ -f ~/.bashrc ]; then . ~/.bashrc; fi; {line}"]


def job_update(result: ExecResult, timeout: float) -> dict:
    """A finished command as the job reports it (the published status words)."""
    update = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
              "stdout_truncated": result.stdout_truncated, "stderr_truncated": result.stderr_truncated,
              "error": result.error, "oom_killed": result.oom_killed,
              "leftover_processes": result.leftover_processes}
    if result.error:
        update.update(status="failed", exit_code=None)
    elif result.timed_out:
        update.update(status="failed", exit_code=TIMEOUT_EXIT_CODE, timed_out=True,
                      error=f"Command timed out after {timeout:g}s",
                      stderr=result.stderr + f"\nCommand timed out after {timeout:g}s and was killed")
    else:
        update["status"] = "succeeded" if result.exit_code == 0 else "failed"
    return update


class EnvManager:
    def __init__(self, backend: str | SandboxBackend = "local", *, max_workers: int = 64,
                 reap_interval: float = 5.0, heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
                 **backend_options) -> None:
        self.backend: SandboxBackend = (
            load_backend(backend, **backend_options) if isinstance(backend, str) else backend
        )
        self.owner = current_owner()
        self.heartbeat_timeout = heartbeat_timeout
        self.open_files = raise_open_files()  # the limit that binds first (limits.py)
        self._sandboxes: dict[str, _Entry] = {}
        self._jobs: dict[str, Job] = {}
        self._job_done: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="orchard-env")
        self._closed = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, args=(reap_interval,),
                                        name="orchard-reaper", daemon=True)
        self._reaper.start()

    # ---- sandboxes -------------------------------------------------------------------------

    def create_sandbox(self, spec: SandboxSpec, *, wait: bool = True, sandbox_id: str | None = None) -> SandboxInfo:
        """Create a sandbox. With wait=False it returns at once in status 'pending'. A client may
        choose the id; asking again for an id that exists gives that sandbox (a retried request)."""
        check = getattr(self.backend, "check", None)
        if check is not None:  # numbers the backend cannot honour: 422 before anything is made
            check(spec)
        now = time.time()
        with self._lock:
            if self._closed.is_set():  # close() destroys what it lists; nothing may come after
                raise InfraError("this environment is closed: it makes no new sandboxes")
            existing = self._sandboxes.get(sandbox_id) if sandbox_id else None
            if existing is not None:
                return existing.info.model_copy()
            sandbox_id = sandbox_id or new_id("sb")
            info = SandboxInfo(sandbox_id=sandbox_id, backend=self.backend.name, status="pending",
                               spec=spec, created_at=now, expires_at=now + spec.timeout,
                               last_heartbeat=now)
            entry = _Entry(info)
            self._sandboxes[sandbox_id] = entry
        if wait:
            self._build(entry)
            if entry.info.status == "failed":
                with self._lock:
                    self._sandboxes.pop(sandbox_id, None)
                raise entry.error
            return entry.info.model_copy()
        self._pool.submit(self._build, entry)
        return info.model_copy()

    def _build(self, entry: _Entry) -> None:
        info = entry.info
        try:
            sandbox = self.backend.create(info.sandbox_id, info.spec, self.owner, info.expires_at)
        except Exception as exc:  # reported on the sandbox; re-raised for wait=True callers
            entry.error = exc if isinstance(exc, OrchardError) else InfraError(
                f"backend {self.backend.name!r} could not create the sandbox: {exc}")
            why = entry.error.message or f"{type(exc).__name__} (no message)"
            if entry.error.hint:
                why += f"; {entry.error.hint}"
            entry.info = info.model_copy(update={"status": "failed", "error": why})
            try:
                self.backend.destroy(info.sandbox_id)
            except Exception:
                pass
        else:
            entry.sandbox = sandbox
            entry.info = sandbox.info.model_copy(update={
                "status": "ready", "created_at": info.created_at, "expires_at": info.expires_at,
                "last_heartbeat": time.time(), "spec": info.spec})
        finally:
            entry.ready.set()

    def _entry(self, sandbox_id: str) -> _Entry:
        with self._lock:
            entry = self._sandboxes.get(sandbox_id)
        if entry is None:
            raise NotFoundError(f"no sandbox {sandbox_id!r}", hint="list them with `orchard env ls`")
        return entry

    def wait_sandbox(self, sandbox_id: str, timeout: float = 300.0) -> SandboxInfo:
        entry = self._entry(sandbox_id)
        entry.ready.wait(timeout)
        return entry.info.model_copy()

    def get_sandbox(self, sandbox_id: str) -> SandboxInfo:
        return self._entry(sandbox_id).info.model_copy()

    def list_sandboxes(self) -> list[SandboxInfo]:
        with self._lock:
            entries = list(self._sandboxes.values())
        return [e.info.model_copy() for e in entries]

    def heartbeat(self, sandbox_id: str) -> SandboxInfo:
        entry = self._entry(sandbox_id)
        entry.info.last_heartbeat = time.time()
        entry.info.heartbeats += 1
        return entry.info.model_copy()

    def delete_sandbox(self, sandbox_id: str) -> SandboxInfo:
        entry = self._entry(sandbox_id)
        with self._lock:
            self._sandboxes.pop(sandbox_id, None)
        entry.ready.wait(600)
        destroyed = False
        try:
            if entry.sandbox is not None:
                entry.sandbox.destroy()
                destroyed = True
        finally:
            if not destroyed:  # never made, or its own destroy failed: by id, from what is left
                self.backend.destroy(sandbox_id)
        entry.info.status = "stopped"
        return entry.info.model_copy()

    def _ready(self, sandbox_id: str) -> Sandbox:
        entry = self._entry(sandbox_id)
        if not entry.ready.wait(600) or entry.sandbox is None:
            raise InfraError(f"sandbox {sandbox_id!r} is not ready: {entry.info.error or entry.info.status}")
        return entry.sandbox

    # ---- exec and jobs -------------------------------------------------------------------------

    def exec(self, sandbox_id: str, request: ExecRequest) -> Job:
        """Orchard's job model: returns the finished job with wait=True, else a queued job."""
        sandbox = self._ready(sandbox_id)
        if request.cwd is not None:
            request = request.model_copy(update={"cwd": self._path(sandbox, request.cwd, any_dir=True)})
        if request.login_shell:
            request = request.model_copy(update={"command": login_shell_command(request.command)})
        job = Job(job_id=new_id("job"), sandbox_id=sandbox_id, status="queued",
                  command=request.command)
        done = threading.Event()
        with self._lock:
            self._jobs[job.job_id] = job
            self._job_done[job.job_id] = done
        if request.wait:
            self._run_job(sandbox, job, request, done)
            return self._jobs[job.job_id].model_copy()
        self._pool.submit(self._run_job, sandbox, job, request, done)
        return job.model_copy()

    def _run_job(self, sandbox: Sandbox, job: Job, request: ExecRequest, done: threading.Event) -> None:
        started = time.time()
        self._jobs[job.job_id] = job.model_copy(update={"status": "running", "started_at": started})
        try:
            result = sandbox.exec(request)
        except Exception as exc:
            result = ExecResult(exit_code=None, error=f"{type(exc).__name__}: {exc}")
        finished = time.time()
        self._jobs[job.job_id] = job.model_copy(update={
            **job_update(result, request.timeout_seconds), "started_at": started, "finished_at": finished,
            "duration_seconds": result.duration_seconds or finished - started})
        done.set()

    def get_job(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r}")
        return job.model_copy()

    def wait_job(self, job_id: str, timeout: float | None = None) -> Job:
        done = self._job_done.get(job_id)
        if done is None:
            raise NotFoundError(f"no job {job_id!r}")
        done.wait(timeout)
        return self.get_job(job_id)

    # ---- files and patches -------------------------------------------------------------------

    def _path(self, sandbox: Sandbox, path: str, any_dir: bool = False) -> str:
        return resolve_sandbox_path(sandbox.info.spec.workdir, path)

    def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> str:
        check_file_mode(mode)
        sandbox = self._ready(sandbox_id)
        resolved = self._path(sandbox, path)
        sandbox.write_file(resolved, data, mode)
        return resolved

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        sandbox = self._ready(sandbox_id)
        return sandbox.read_file(self._path(sandbox, path))

    def open_pty(self, sandbox_id: str, request: PtyRequest) -> Any:
        """A process on a pseudo-terminal in the sandbox (`Sandbox.open_pty`'s stream). A login
        shell runs the command as `bash --login -i` after ~/.bashrc, as the published API does."""
        sandbox = self._ready(sandbox_id)
        if request.cwd is not None:
            request = request.model_copy(update={"cwd": self._path(sandbox, request.cwd, any_dir=True)})
        if request.login_shell:
            line = shlex.join(request.cmd)
            request = request.model_copy(update={"cmd": [
                "bash", "--login", "-i", "-c", f"if [ -f ~/.bashrc ]; then . ~/.bashrc; fi; {line}"]})
        return sandbox.open_pty(request)

    def list_files(self, sandbox_id: str, path: str | None = None) -> FileList:
        """The entries of a folder in the sandbox (not recursive), sorted by name; read by a
        command inside it, so any folder the sandbox sees can be listed."""
        sandbox = self._ready(sandbox_id)
        folder = self._path(sandbox, path or sandbox.info.spec.workdir, any_dir=True)
        result = sandbox.exec(ExecRequest(command=["/bin/sh", "-c", LIST_SCRIPT, "orchard-ls", folder],
                                          timeout_seconds=60, cwd="/"))
        if result.error or result.timed_out:
            raise InfraError(f"cannot list {folder}: {result.error or 'timed out'}")
        if result.exit_code == 44:
            raise NotFoundError(f"Path not found: {folder}")
        if result.exit_code == 45:
            raise UsageError(f"{folder} is not a folder")
        entries = []
        for line in result.stdout.splitlines():
            kind, size, mtime, name = (line.split("\t", 3) + ["", "", "", ""])[:4]
            if not name:
                continue
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(mtime))) if mtime.isdigit() else None
            entries.append(FileEntry(name=name, type="directory" if kind == "directory" else "file",
                                     size=int(size) if size.isdigit() else 0, modified=stamp))
        return FileList(path=folder, files=sorted(entries, key=lambda e: e.name))

    def apply_patch(self, sandbox_id: str, patch: str, cwd: str | None = None,
                    timeout: float | None = None) -> PatchResult:
        sandbox = self._ready(sandbox_id)
        where = self._path(sandbox, cwd or sandbox.info.spec.workdir)
        return _apply_patch(sandbox, patch, where, timeout)

    # ---- expiry, heartbeats, gc --------------------------------------------------------------

    def _reap_loop(self, interval: float) -> None:
        while not self._closed.wait(interval):
            try:
                self.reap_expired()
                self._forget_old_jobs()
            except Exception:
                pass

    def _forget_old_jobs(self) -> None:
        cutoff = time.time() - JOB_RETENTION_SECONDS
        with self._lock:
            old = [j for j, job in self._jobs.items()
                   if job.finished and (job.finished_at or 0) < cutoff]
            for job_id in old:
                self._jobs.pop(job_id, None)
                self._job_done.pop(job_id, None)

    def reap_expired(self) -> list[str]:
        """Destroy tracked sandboxes past their timeout or their heartbeat deadline."""
        now = time.time()
        doomed = []
        for info in self.list_sandboxes():
            # its own heartbeat timeout; else, once it has sent one, the service's (published: 180 s)
            hb = info.spec.heartbeat_timeout or (self.heartbeat_timeout if info.heartbeats else None)
            if info.status == "pending":
                continue
            if now > info.expires_at or (hb and now - info.last_heartbeat > hb):
                doomed.append(info.sandbox_id)
        for sandbox_id in doomed:
            try:
                self.delete_sandbox(sandbox_id)
            except NotFoundError:
                pass
        return doomed

    def gc(self) -> list[str]:
        """Reap what this manager tracks past its deadline or whose client process is gone (its
        `orchard.client` label: a client on this host that died), and every orphan on the
        backend: resources whose owner process is gone (crash, kill -9) or whose timeout has passed."""
        reaped = self.reap_expired()
        for info in self.list_sandboxes():
            client = info.spec.labels.get(CLIENT_LABEL)
            if client and info.status != "pending" and not owner_alive(client):
                try:
                    self.delete_sandbox(info.sandbox_id)
                    reaped.append(info.sandbox_id)
                except NotFoundError:
                    pass
        with self._lock:
            tracked = set(self._sandboxes)
        now = time.time()
        for res in self.backend.resources():
            if res.sandbox_id in tracked:
                continue
            if res.owner == self.owner or (owner_alive(res.owner) and not (0 < res.expires_at < now)):
                continue
            self.backend.destroy(res.sandbox_id)
            reaped.append(res.sandbox_id)
        return reaped

    def close(self) -> None:
        """Destroy every sandbox this manager created."""
        self._closed.set()
        for info in self.list_sandboxes():
            try:
                self.delete_sandbox(info.sandbox_id)
            except OrchardError:
                pass
        self._pool.shutdown(wait=False, cancel_futures=True)
        closer = getattr(self.backend, "close", None)
        if closer:
            closer()

    def __enter__(self) -> "EnvManager":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_spec(spec: dict) -> SandboxSpec:
    try:
        return SandboxSpec.model_validate(spec)
    except Exception as exc:
        raise UsageError(f"bad sandbox spec: {exc}") from exc
