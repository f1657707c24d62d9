"""EnvClient: the `EnvManager` API over HTTP, against an Orchard Env service.

Same methods, same pydantic models, same errors: the service's JSON errors become the same
`OrchardError` subclasses here, so callers (and the CLI's one-line messages) cannot tell the
in-process manager from the service. A service that cannot be reached is an `InfraError` with the
hint `orchard env up`. Long waits are split into bounded requests, so no HTTP request hangs for
longer than `WAIT_CHUNK` seconds (plus a command's own timeout for `exec` with `wait`).
"""

from __future__ import annotations

import base64
import os
import threading
import time
from typing import Any

import httpx

from orchard_cli import errors
from orchard_cli.env.auth import HEADER, KEY_ENV, client_key
from orchard_cli.env.models import (
    CLIENT_LABEL,
    ExecRequest,
    FileContent,
    Job,
    PatchResult,
    SandboxInfo,
    SandboxSpec,
)
from orchard_cli.errors import InfraError, OrchardError

URL_ENV = "ORCHARD_ENV_URL"
WAIT_CHUNK = 60.0
HEARTBEAT_TIMEOUT = 120
"""Seconds without a heartbeat after which the service destroys a sandbox this client made
(ORCHARD_ENV_HEARTBEAT_TIMEOUT overrides; a spec's own heartbeat_timeout wins)."""
OVERLOAD_RETRIES = 5  # 503 answers waited out (after Retry-After seconds) before giving up
# Extra seconds, beyond a command's own timeout, that a blocking exec may take over HTTP.
EXEC_MARGIN = 60.0
_BY_STATUS: dict[int, type[OrchardError]] = {
    400: errors.UsageError, 401: errors.AuthError, 403: errors.PathEscapeError,
    404: errors.NotFoundError, 408: errors.WaitTimeout, 413: errors.TooLargeError,
    422: errors.UsageError, 501: errors.MissingDependencyError, 503: errors.OverloadedError,
}


def _error_class(name: str | None, status: int) -> type[OrchardError]:
    cls = getattr(errors, name or "", None)
    if isinstance(cls, type) and issubclass(cls, OrchardError):
        return cls
    return _BY_STATUS.get(status, InfraError if status >= 500 else errors.UsageError)


class EnvClient:
    """The Orchard Env API at `url` (default: ORCHARD_ENV_URL), authenticated with `key`
    (default: ORCHARD_ENV_KEY, else ORCHARD_HOME/env/api-key)."""

    def __init__(self, url: str | None = None, key: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        url = url or os.environ.get(URL_ENV)
        if not url:
            raise errors.UsageError(f"no Orchard Env URL: set {URL_ENV} or pass url",
                                    hint="start a service with `orchard env up --detach`")
        self.url = url.rstrip("/")
        key = key if key is not None else client_key()
        headers = {HEADER: key} if key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout,
                                  transport=transport)
        self._created: list[str] = []
        self.heartbeat_timeout = int(os.environ.get("ORCHARD_ENV_HEARTBEAT_TIMEOUT") or HEARTBEAT_TIMEOUT)
        self._beating = threading.Event()
        self._beat_thread: threading.Thread | None = None

    # ---- plumbing ----------------------------------------------------------------------------

    def _request(self, method: str, path: str, *, timeout: float | None = None, **kwargs) -> Any:
        if timeout is not None:
            kwargs["timeout"] = httpx.Timeout(timeout, connect=10.0)
        for attempt in range(OVERLOAD_RETRIES + 1):
            response = self._send(method, path, kwargs)
            if response.status_code != 503 or attempt == OVERLOAD_RETRIES:
                break
            try:  # overloaded: the service says when to come back
                delay = float(response.headers.get("Retry-After") or 1.0)
            except ValueError:
                delay = 1.0
            time.sleep(min(max(delay, 0.1), 30.0))
        if response.status_code >= 400:
            raise self._error(response)
        return response.json()

    def _send(self, method: str, path: str, kwargs: dict) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise InfraError(f"Orchard Env at {self.url} did not answer {method} {path} in time",
                             hint="is the service overloaded? check `orchard env status`") from exc
        except httpx.TransportError as exc:
            raise InfraError(f"cannot reach Orchard Env at {self.url}: {exc}",
                             hint="start it with `orchard env up` (or check ORCHARD_ENV_URL)") from exc

    def _error(self, response: httpx.Response) -> OrchardError:
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        detail = body.get("detail") or response.text.strip()[:200] or response.reason_phrase
        if not isinstance(detail, str):
            detail = str(detail)
        cls = _error_class(body.get("error"), response.status_code)
        hint = body.get("hint")
        if cls is errors.AuthError:
            hint = f"use the service's key: set {KEY_ENV}, or share ORCHARD_HOME/env/api-key"
        return cls(detail, hint=hint)

    # ---- the Env API ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health", timeout=10.0)

    def create_sandbox(self, spec: SandboxSpec, *, wait: bool = True) -> SandboxInfo:
        """Create a sandbox that lives while this client does: it carries a heartbeat timeout and
        this process's identity, and this client heartbeats it until it is deleted or closed."""
        from orchard_cli.env.owner import current_owner

        updates = {"labels": {CLIENT_LABEL: current_owner(), **spec.labels}}
        if spec.heartbeat_timeout is None:
            updates["heartbeat_timeout"] = self.heartbeat_timeout
        body = spec.model_copy(update=updates).model_dump(mode="json")
        info = SandboxInfo.model_validate(self._request("POST", "/sandboxes", json=body))
        self._created.append(info.sandbox_id)
        self._start_heartbeats(info.spec.heartbeat_timeout or self.heartbeat_timeout)
        if not wait:
            return info
        info = self.wait_sandbox(info.sandbox_id, timeout=3600.0)
        if info.status == "failed":
            self._created.remove(info.sandbox_id)
            try:
                self.delete_sandbox(info.sandbox_id)
            except OrchardError:
                pass
            raise errors.SandboxError(f"sandbox {info.sandbox_id} could not be created: {info.error}")
        return info

    def wait_sandbox(self, sandbox_id: str, timeout: float = 300.0) -> SandboxInfo:
        """The sandbox once ready or failed, or as it is when `timeout` runs out (the service
        answers 408 to a wait that ran out; this loops in bounded requests)."""
        deadline = time.monotonic() + timeout
        while True:
            chunk = max(0.0, min(WAIT_CHUNK, deadline - time.monotonic()))
            try:
                return SandboxInfo.model_validate(self._request(
                    "GET", f"/sandboxes/{sandbox_id}/wait", params={"timeout": chunk},
                    timeout=chunk + 30.0))
            except errors.WaitTimeout:
                if time.monotonic() >= deadline:
                    return self.get_sandbox(sandbox_id)

    def get_sandbox(self, sandbox_id: str) -> SandboxInfo:
        return SandboxInfo.model_validate(self._request("GET", f"/sandboxes/{sandbox_id}"))

    def list_sandboxes(self) -> list[SandboxInfo]:
        return [SandboxInfo.model_validate(s) for s in self._request("GET", "/sandboxes")]

    def heartbeat(self, sandbox_id: str) -> SandboxInfo:
        return SandboxInfo.model_validate(self._request("POST", f"/sandboxes/{sandbox_id}/heartbeat"))

    def delete_sandbox(self, sandbox_id: str) -> SandboxInfo:
        body = self._request("DELETE", f"/sandboxes/{sandbox_id}", timeout=660.0)
        if sandbox_id in self._created:
            self._created.remove(sandbox_id)
        if "spec" not in body:  # the service deletes unknown ids too (idempotent), and says so
            raise errors.NotFoundError(f"no sandbox {sandbox_id!r}")
        return SandboxInfo.model_validate(body)

    def exec(self, sandbox_id: str, request: ExecRequest) -> Job:
        body = request.model_dump(mode="json")
        if request.wait:
            return Job.model_validate(self._request(
                "POST", f"/sandboxes/{sandbox_id}/exec", json=body,
                timeout=request.timeout_seconds + EXEC_MARGIN))
        # The sandbox may still be starting: the service waits for it before queueing the job.
        answer = self._request("POST", f"/sandboxes/{sandbox_id}/exec", json=body, timeout=660.0)
        return Job(job_id=answer["job_id"], sandbox_id=answer.get("sandbox_id", sandbox_id),
                   status=answer["status"], command=request.command)

    def get_job(self, job_id: str) -> Job:
        return Job.model_validate(self._request("GET", f"/jobs/{job_id}"))

    def wait_job(self, job_id: str, timeout: float | None = None) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_CHUNK if deadline is None else deadline - time.monotonic()
            chunk = max(0.0, min(WAIT_CHUNK, left))
            job = Job.model_validate(self._request("GET", f"/jobs/{job_id}/wait",
                                                   params={"timeout": chunk}, timeout=chunk + 30.0))
            if job.finished or (deadline is not None and time.monotonic() >= deadline):
                return job

    def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> str:
        body = {"path": path, "content": base64.b64encode(data).decode(), "encoding": "base64",
                "mode": mode}
        return self._request("PUT", f"/sandboxes/{sandbox_id}/files", json=body,
                             timeout=300.0)["path"]

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        content = FileContent.model_validate(self._request(
            "GET", f"/sandboxes/{sandbox_id}/files", params={"path": path}, timeout=300.0))
        if content.encoding == "base64":
            return base64.b64decode(content.content)
        return content.content.encode()

    def apply_patch(self, sandbox_id: str, patch: str, cwd: str | None = None) -> PatchResult:
        return PatchResult.model_validate(self._request(
            "POST", f"/sandboxes/{sandbox_id}/apply_patch", json={"patch": patch, "cwd": cwd},
            timeout=600.0))

    def gc(self) -> list[str]:
        return list(self._request("POST", "/gc", timeout=600.0)["reaped"])

    def _start_heartbeats(self, timeout: int) -> None:
        if self._beat_thread is None:
            every = max(1.0, min(30.0, timeout / 4))
            self._beat_thread = threading.Thread(target=self._heartbeats, args=(every,),
                                                 name="orchard-env-heartbeat", daemon=True)
            self._beat_thread.start()

    def _heartbeats(self, every: float) -> None:
        while not self._beating.wait(every):
            for sandbox_id in list(self._created):
                try:
                    self.heartbeat(sandbox_id)
                except OrchardError:  # gone, or the service is: the next round tries again
                    pass
                except RuntimeError:  # the connection was closed meanwhile
                    return

    def close(self) -> None:
        """Destroy the sandboxes this client created and still holds, then close the connection
        (the same promise as `EnvManager.close`; the service itself keeps running)."""
        self._beating.set()
        try:
            for sandbox_id in list(self._created):
                try:
                    self.delete_sandbox(sandbox_id)
                except errors.NotFoundError:
                    self._created.remove(sandbox_id)
                except OrchardError:
                    break
        finally:
            self._http.close()

    def __enter__(self) -> "EnvClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
