"""The Orchard Env HTTP service: a thin FastAPI skin over one `EnvManager`.

Every route but `/health` needs the API key (`X-API-Key: KEY` or `Authorization: Bearer KEY`).
Bodies and answers are the pydantic models of `models.py`. Blocking routes (create with wait,
the waits, exec with wait) are sync functions, so they run in the threadpool, whose limit is
raised at start-up: hundreds of callers may wait at once without stalling the event loop.
Errors are JSON `{"detail", "hint", "error"}` with the status code of the `OrchardError` class;
`EnvClient` maps them back to the same classes.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from orchard_cli import __version__
from orchard_cli.env.auth import check_key, presented_key
from orchard_cli.env.body_limit import BodyLimit
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.pty_socket import serve_pty
from orchard_cli.env.models import (
    CreateSandbox,
    ExecRequest,
    FileContent,
    FileList,
    FileUpload,
    FileWrite,
    Job,
    PatchRequest,
    PatchResult,
    SandboxInfo,
)
from orchard_cli.errors import AuthError, NotFoundError, OrchardError, OverloadedError, UsageError, WaitTimeout

log = logging.getLogger("orchard.env.service")

# Threads that may block in waits at once (anyio's default is 40).
DEFAULT_THREADS = 1024
# Sandboxes being created at once before creates are answered 503 + Retry-After.
MAX_PENDING = int(os.environ.get("ORCHARD_ENV_MAX_PENDING", "256"))
# The longest a single wait may block, in seconds; clients loop for longer waits.
MAX_WAIT = 3600.0
PUBLIC_PATHS = frozenset({"/health"})


def error_body(exc: OrchardError) -> dict[str, Any]:
    return {"detail": exc.message, "hint": exc.hint, "error": type(exc).__name__}


class _KeyMiddleware:
    """Checks the API key before anything else (even before the body is parsed)."""

    def __init__(self, app, key: str) -> None:
        self.app = app
        self.key = key

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] not in PUBLIC_PATHS:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            try:
                check_key(presented_key(headers), self.key)
            except AuthError as exc:
                response = JSONResponse(error_body(exc), status_code=exc.status_code,
                                        headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        elif scope["type"] == "websocket":  # the key in a header, or ?api_key= as browsers and the SDK send it
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            try:
                check_key(presented_key(headers) or query.get("api_key"), self.key)
            except AuthError:  # accepted, then closed: the client reads 4401 (a close before accept is a bare 403)
                if (await receive())["type"] == "websocket.connect":
                    await send({"type": "websocket.accept"})
                    await send({"type": "websocket.close", "code": 4401})
                return
        await self.app(scope, receive, send)


def _validation_reason(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts).replace("\n", " ") or "invalid request"


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(OrchardError)
    async def _orchard(_: Request, exc: OrchardError) -> JSONResponse:
        if isinstance(exc, OverloadedError):
            return JSONResponse(error_body(exc), status_code=exc.status_code,
                                headers={"Retry-After": f"{exc.retry_after:g}"})
        return JSONResponse(error_body(exc), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        body = {"detail": f"invalid request: {_validation_reason(exc)}", "hint": None,
                "error": UsageError.__name__}
        return JSONResponse(body, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        name = "NotFoundError" if exc.status_code == 404 else "UsageError"
        return JSONResponse({"detail": str(exc.detail), "hint": None, "error": name},
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        body = {"detail": f"internal error: {type(exc).__name__}: {exc}",
                "hint": "see the service log", "error": "InfraError"}
        return JSONResponse(body, status_code=500)


def create_app(manager: EnvManager, key: str, *, gc_on_start: bool = True,
               close_on_shutdown: bool = True, threads: int | None = None,
               max_pending: int | None = None) -> FastAPI:
    """The service over `manager`. On start it reaps the backend's orphans (gc); on shutdown it
    destroys every sandbox it created (`manager.close()`)."""
    threads = threads or int(os.environ.get("ORCHARD_ENV_THREADS", DEFAULT_THREADS))

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        if gc_on_start:
            reaped = await anyio.to_thread.run_sync(manager.gc)
            if reaped:
                log.info("gc at start reaped %d orphan sandbox(es): %s", len(reaped), ", ".join(reaped))
        yield
        if close_on_shutdown:
            count = len(manager.list_sandboxes())
            log.info("shutting down: destroying %d sandbox(es)", count)
            await anyio.to_thread.run_sync(manager.close)

    app = FastAPI(title="Orchard Env", version=__version__, lifespan=lifespan)
    app.add_middleware(BodyLimit)  # inside the key check: a stranger's body is not even counted
    app.add_middleware(_KeyMiddleware, key=key)
    _install_error_handlers(app)
    app.state.manager = manager
    app.state.max_pending = max_pending or MAX_PENDING
    _add_routes(app, manager)
    return app


def _wait_seconds(timeout: float | None, default: float) -> float:
    if timeout is None:
        return default
    if timeout < 0:
        raise UsageError("timeout must not be negative")
    return min(timeout, MAX_WAIT)


def _add_routes(app: FastAPI, m: EnvManager) -> None:
    @app.get("/health")
    async def health() -> dict[str, Any]:  # on the event loop: answers even when threads are busy
        return {"status": "ok", "backend": m.backend.name, "version": __version__,
                "sandboxes": len(m.list_sandboxes())}

    @app.post("/sandboxes", response_model=SandboxInfo)
    def create_sandbox(body: CreateSandbox, wait: bool = False) -> SandboxInfo:
        pending = sum(1 for s in m.list_sandboxes() if s.status == "pending")
        if pending >= app.state.max_pending:
            raise OverloadedError(f"{pending} sandboxes are being created; try again shortly", retry_after=1)
        return m.create_sandbox(body.spec(), wait=wait, sandbox_id=body.sandbox_id)

    @app.get("/sandboxes", response_model=list[SandboxInfo])
    def list_sandboxes() -> list[SandboxInfo]:
        return m.list_sandboxes()

    @app.get("/sandboxes/{sandbox_id}", response_model=SandboxInfo)
    def get_sandbox(sandbox_id: str) -> SandboxInfo:
        return m.get_sandbox(sandbox_id)

    @app.get("/sandboxes/{sandbox_id}/wait", response_model=SandboxInfo)
    def wait_sandbox(sandbox_id: str, timeout: float | None = None) -> SandboxInfo:
        """The sandbox once it is ready or failed; 408 when it is still pending after `timeout`."""
        seconds = _wait_seconds(timeout, MAX_WAIT)
        info = m.wait_sandbox(sandbox_id, seconds)
        if info.status == "pending":
            raise WaitTimeout(f"Sandbox {sandbox_id} did not become ready within {seconds:g}s")
        return info

    @app.delete("/sandboxes/{sandbox_id}")
    def delete_sandbox(sandbox_id: str) -> dict[str, Any]:
        """Idempotent, as the published API: an id that is already gone is deleted too."""
        try:
            return m.delete_sandbox(sandbox_id).model_dump(mode="json")
        except NotFoundError:
            return {"status": "deleted", "sandbox_id": sandbox_id, "found": False}

    @app.post("/sandboxes/{sandbox_id}/heartbeat", response_model=SandboxInfo)
    def heartbeat(sandbox_id: str) -> SandboxInfo:
        return m.heartbeat(sandbox_id)

    @app.post("/sandboxes/{sandbox_id}/exec")
    def exec_(sandbox_id: str, request: ExecRequest) -> dict[str, Any]:
        job = m.exec(sandbox_id, request)
        if request.wait:
            return job.model_dump(mode="json")
        return {"job_id": job.job_id, "status": job.status, "sandbox_id": job.sandbox_id}

    @app.get("/jobs/{job_id}", response_model=Job)
    def get_job(job_id: str) -> Job:
        return m.get_job(job_id)

    @app.get("/jobs/{job_id}/wait", response_model=Job)
    def wait_job(job_id: str, timeout: float | None = None) -> Job:
        return m.wait_job(job_id, _wait_seconds(timeout, MAX_WAIT))

    @app.post("/sandboxes/{sandbox_id}/files")
    def upload_file(sandbox_id: str, body: FileUpload) -> dict[str, Any]:
        try:
            data = base64.b64decode(body.content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise UsageError(f"content is not valid base64: {exc}") from exc
        path = m.write_file(sandbox_id, body.path, data, body.mode)
        return {"success": True, "path": path, "size": len(data)}

    @app.get("/sandboxes/{sandbox_id}/files/list", response_model=FileList)
    def list_files(sandbox_id: str, path: str | None = None) -> FileList:
        return m.list_files(sandbox_id, path)

    @app.put("/sandboxes/{sandbox_id}/files")
    def write_file(sandbox_id: str, body: FileWrite) -> dict[str, Any]:
        if body.encoding == "base64":
            try:
                data = base64.b64decode(body.content, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise UsageError(f"content is not valid base64: {exc}") from exc
        else:
            data = body.content.encode()
        path = m.write_file(sandbox_id, body.path, data, body.mode)
        return {"success": True, "path": path, "bytes": len(data), "size": len(data)}

    @app.get("/sandboxes/{sandbox_id}/files", response_model=FileContent)
    def read_file(sandbox_id: str, path: str) -> FileContent:
        data = m.read_file(sandbox_id, path)
        return FileContent(path=path, content=base64.b64encode(data).decode(), encoding="base64",
                           size=len(data))

    @app.post("/sandboxes/{sandbox_id}/apply_patch", response_model=PatchResult)
    def apply_patch(sandbox_id: str, body: PatchRequest) -> PatchResult:
        return m.apply_patch(sandbox_id, body.patch, body.cwd, body.timeout_seconds)

    @app.post("/gc")
    def gc() -> dict[str, list[str]]:
        return {"reaped": m.gc()}

    @app.websocket("/sandboxes/{sandbox_id}/exec/pty")
    async def pty(websocket: WebSocket, sandbox_id: str) -> None:
        await serve_pty(websocket, m, sandbox_id)
