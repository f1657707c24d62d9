"""Running the Orchard Env service: in the foreground, detached, and stopping it.

A running service (foreground or detached) records itself in `ORCHARD_HOME/env/service.json`
(`ServiceState`: pid, owner, url, backend; never the key) and removes that file when it stops. A
detached service logs to `ORCHARD_HOME/env/service.log`. One service per ORCHARD_HOME: `env up`
while one runs reports the running one instead of starting a second.
"""

from __future__ import annotations

import logging
import re
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, ValidationError

from orchard_cli.env.auth import key_source
from orchard_cli.env.owner import current_owner, owner_alive
from orchard_cli.errors import InfraError
from orchard_cli.home import state_dir

KEEP_ALIVE = 120  # seconds an idle client connection stays open (pooled SDK clients idle between calls)
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_BACKEND = "local"
STATE_VERSION = 1


class ServiceState(BaseModel):
    """`ORCHARD_HOME/env/service.json`: the service that runs for this ORCHARD_HOME."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = STATE_VERSION
    pid: int
    owner: str
    """'host:pid:starttime' of the service process (tells a live service from a reused pid)."""
    url: str
    backend: str
    host: str
    port: int
    started_at: float
    key: str
    """Where clients find the API key: 'ORCHARD_ENV_KEY' or the key file's path (never the key)."""
    log: str | None = None
    """The log file of a detached service."""

    @property
    def alive(self) -> bool:
        return owner_alive(self.owner)


def state_path() -> Path:
    return state_dir("env") / "service.json"


def log_path() -> Path:
    return state_dir("env") / "service.log"


def read_state() -> ServiceState | None:
    """The recorded service, alive or not; None when there is no (readable) record."""
    try:
        return ServiceState.model_validate_json(state_path().read_text())
    except (OSError, ValidationError, ValueError):
        return None


def running_state() -> ServiceState | None:
    """The recorded service if its process still runs. A stale record (the service was killed)
    stays until `env gc` / `env down` has reaped its backend, or `env up` replaces it."""
    state = read_state()
    return state if state is not None and state.alive else None


def forget_stale() -> None:
    """Remove the record of a service that no longer runs."""
    state = read_state()
    if state is not None and not state.alive:
        _remove_state(state.pid)


def _write_state(state: ServiceState) -> None:
    path = state_path()
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(state.model_dump_json(indent=2) + "\n")
    os.replace(tmp, path)


def _remove_state(pid: int) -> None:
    state = read_state()
    if state is None or state.pid == pid:
        state_path().unlink(missing_ok=True)


def health(url: str, timeout: float = 3.0) -> dict[str, Any] | None:
    """The service's /health answer, or None when nothing answers there."""
    import httpx

    try:
        response = httpx.get(url.rstrip("/") + "/health", timeout=timeout)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"  # the address local clients use for a wildcard bind
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY only then
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise InfraError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="choose another --port (--port 0 picks a free one)") from exc
    sock.set_inheritable(True)
    return sock


def serve(backend: str = DEFAULT_BACKEND, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
          on_ready: Callable[[ServiceState], None] | None = None, log_level: str = "info") -> None:
    """Run the service in this process until SIGTERM / SIGINT; then destroy its sandboxes."""
    from orchard_cli.env.auth import service_key
    from orchard_cli.env.manager import EnvManager
    from orchard_cli.env.service import create_app

    lock = _lock()
    key = service_key()
    manager = EnvManager(backend, max_workers=256)
    try:
        sock = _bind(host, port)
    except InfraError:
        manager.close()
        os.close(lock)
        raise
    actual_port = sock.getsockname()[1]
    state = ServiceState(pid=os.getpid(), owner=current_owner(), url=_url(host, actual_port),
                         backend=manager.backend.name, host=host, port=actual_port,
                         started_at=time.time(), key=key_source(),
                         log=os.environ.get("ORCHARD_ENV_LOG"))
    import threading

    import uvicorn

    _log_to_stderr(log_level)
    said = manager.open_files.describe()
    if said:
        logging.getLogger("orchard.env.service").info("%s", said)
    closing = threading.Lock()
    closed: list[bool] = []

    def close_once() -> None:  # on the first signal, so running commands end at once
        with closing:
            if not closed:
                closed.append(True)
                count = len(manager.list_sandboxes())
                logging.getLogger("orchard.env.service").info(
                    "stopping: destroying %d sandbox(es)", count)
                manager.close()

    app = create_app(manager, key, close_on_shutdown=False)
    # keep-alive: pooled SDK clients idle between calls; pings every 5 s keep a quiet terminal
    # session open for clients that time out a silent socket (websocket-client gives up at 10 s)
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5, timeout_keep_alive=KEEP_ALIVE,
                            ws_ping_interval=5.0, access_log=log_level == "debug")
    _redact_uvicorn_logs()  # after uvicorn set its loggers up
    server = _server_class()(config)
    server.on_stop = close_once
    _write_state(state)
    try:
        if on_ready:
            on_ready(state)
        server.run(sockets=[sock])
    finally:
        close_once()
        _remove_state(state.pid)
        sock.close()
        os.close(lock)
    if server.stop_signal == signal.SIGINT:
        raise KeyboardInterrupt


def _server_class():
    """uvicorn.Server that returns after SIGTERM / SIGINT (having shut down gracefully) instead
    of re-raising the signal, so `serve` can clean up and the process exits normally."""
    import threading
    from contextlib import contextmanager

    import uvicorn

    class Server(uvicorn.Server):
        stop_signal: int | None = None
        on_stop: Callable[[], None] | None = None

        def handle_exit(self, sig, frame) -> None:
            if self.stop_signal is None and self.on_stop is not None:
                threading.Thread(target=self.on_stop, name="orchard-stop", daemon=True).start()
            self.stop_signal = self.stop_signal or sig
            super().handle_exit(sig, frame)

        @contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            old = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in old.items():
                    signal.signal(sig, handler)

    return Server


class _RedactKeys(logging.Filter):
    """Never log an API key: the SDK's terminal sessions carry it in the URL (?api_key=...)."""

    pattern = re.compile(r"(api_key=)[^&\s\"']+")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.args = tuple(self.pattern.sub(r"\1[REDACTED]", a) if isinstance(a, str) else a
                                for a in (record.args if isinstance(record.args, tuple) else (record.args,)))
        if isinstance(record.msg, str):
            record.msg = self.pattern.sub(r"\1[REDACTED]", record.msg)
        return True


def _redact_uvicorn_logs() -> None:
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RedactKeys) for f in logger.filters):
            logger.addFilter(_RedactKeys())


def _log_to_stderr(level: str) -> None:
    logger = logging.getLogger("orchard")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level.upper())


def _lock() -> int:
    """Hold `env/service.lock` for the life of the service: one service per ORCHARD_HOME."""
    import fcntl

    path = state_dir("env") / "service.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        state = read_state()
        where = f" at {state.url}" if state else ""
        raise InfraError(f"an Orchard Env service already runs for this ORCHARD_HOME{where}",
                         hint="use it, or stop it with `orchard env down`") from None
    return fd


def start_detached(backend: str = DEFAULT_BACKEND, host: str = DEFAULT_HOST,
                   port: int = DEFAULT_PORT, *, timeout: float = 120.0) -> ServiceState:
    """Start the service as a background process; return once its /health answers."""
    log = log_path()
    env = {**os.environ, "ORCHARD_ENV_LOG": str(log)}
    cmd = [sys.executable, "-m", "orchard_cli.main", "env", "up", "--backend", backend,
           "--host", host, "--port", str(port)]
    with open(log, "ab") as fh:
        fh.write(f"\n--- orchard env up --backend {backend} ({time.strftime('%Y-%m-%d %H:%M:%S')})\n".encode())
        fh.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, close_fds=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise InfraError(f"the service exited at start (code {code}): {_last_error(log)}",
                             hint=f"see {log}")
        state = read_state()
        if state is not None and state.pid == proc.pid and health(state.url, timeout=1.0):
            return state
        time.sleep(0.1)
    proc.terminate()
    raise InfraError(f"the service did not answer within {timeout:.0f}s", hint=f"see {log}")


def _last_error(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["(empty log)"])[-1].removeprefix("error: ")


def stop(timeout: float = 30.0) -> tuple[ServiceState | None, str]:
    """Stop the recorded service: SIGTERM, wait up to `timeout`, then SIGKILL.

    Returns (state, how) with how in 'stopped', 'killed', 'stale' (it had died already), or
    'none' (no record)."""
    state = read_state()
    if state is None:
        return None, "none"
    if not state.alive:
        _remove_state(state.pid)
        return state, "stale"
    how = "stopped"
    _signal(state.pid, signal.SIGTERM)
    if not _wait_dead(state, timeout):
        _signal(state.pid, signal.SIGKILL)
        how = "killed"
        if not _wait_dead(state, 10.0):
            raise InfraError(f"the service (pid {state.pid}) did not die after SIGKILL")
    _remove_state(state.pid)
    return state, how


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_dead(state: ServiceState, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not state.alive:
            return True
        time.sleep(0.05)
    return not state.alive


def service_url() -> str | None:
    """Where a client should look: ORCHARD_ENV_URL, else this ORCHARD_HOME's running service."""
    url = os.environ.get("ORCHARD_ENV_URL")
    if url:
        return url
    state = running_state()
    return state.url if state else None
