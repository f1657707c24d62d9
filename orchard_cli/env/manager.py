"""EnvManager: the Orchard Env API in-process, over one backend.

It owns what every backend shares: sandbox ids, Orchard's job model (exec returns a job id at
once, or blocks with `wait`), expiry and heartbeats, the file API's path rules, apply_patch, and gc
of orphans. The HTTP service (`service.py`) is a thin skin over this class, and `EnvClient`
(`client.py`) offers the same methods over HTTP, so callers see one API either way.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from orchard_cli.env.backends import load_backend
from orchard_cli.env.base import Sandbox, SandboxBackend
from orchard_cli.env.models import (
    CLIENT_LABEL,
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


class EnvManager:
    def __init__(self, backend: str | SandboxBackend = "local", *, max_workers: int = 64,
                 reap_interval: float = 5.0, **backend_options) -> None:
        self.backend: SandboxBackend = (
            load_backend(backend, **backend_options) if isinstance(backend, str) else backend
        )
        self.owner = current_owner()
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

    def create_sandbox(self, spec: SandboxSpec, *, wait: bool = True) -> SandboxInfo:
        """Create a sandbox. With wait=False it returns at once in status 'creating'."""
        sandbox_id = new_id("sb")
        now = time.time()
        info = SandboxInfo(sandbox_id=sandbox_id, backend=self.backend.name, status="creating",
                           spec=spec, created_at=now, expires_at=now + spec.timeout,
                           last_heartbeat=now)
        entry = _Entry(info)
        with self._lock:
            self._sandboxes[sandbox_id] = entry
        if wait:
            self._build(entry)
            if entry.info.status == "error":
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
            entry.info = info.model_copy(update={"status": "error", "error": str(exc)})
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
        return entry.info.model_copy()

    def delete_sandbox(self, sandbox_id: str) -> SandboxInfo:
        entry = self._entry(sandbox_id)
        with self._lock:
            self._sandboxes.pop(sandbox_id, None)
        entry.ready.wait(600)
        try:
            if entry.sandbox is not None:
                entry.sandbox.destroy()
        finally:
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
        status = "error" if result.error else "timeout" if result.timed_out else "completed"
        self._jobs[job.job_id] = job.model_copy(update={
            "status": status, "exit_code": result.exit_code, "stdout": result.stdout,
            "stderr": result.stderr, "stdout_truncated": result.stdout_truncated,
            "stderr_truncated": result.stderr_truncated, "started_at": started,
            "finished_at": finished, "duration_seconds": result.duration_seconds or finished - started,
            "error": result.error, "oom_killed": result.oom_killed,
            "leftover_processes": result.leftover_processes})
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
        sandbox = self._ready(sandbox_id)
        resolved = self._path(sandbox, path)
        sandbox.write_file(resolved, data, mode)
        return resolved

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        sandbox = self._ready(sandbox_id)
        return sandbox.read_file(self._path(sandbox, path))

    def apply_patch(self, sandbox_id: str, patch: str, cwd: str | None = None) -> PatchResult:
        sandbox = self._ready(sandbox_id)
        where = self._path(sandbox, cwd or sandbox.info.spec.workdir)
        return _apply_patch(sandbox, patch, where)

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
            hb = info.spec.heartbeat_timeout
            if info.status == "creating":
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
            if client and info.status != "creating" and not owner_alive(client):
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
