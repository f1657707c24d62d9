"""Run an aiohttp application on loopback: in a background thread (for a run) or in the foreground.

Used by the scripted endpoint, the recording proxy and the local model server. `LoopbackEndpoint`
is the start/stop lifecycle the scripted and local endpoints share. aiohttp is imported lazily so
that `orchard --help` stays fast.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from orchard_cli.errors import InfraError
from orchard_cli.models.base import EndpointInfo, read_key

T = TypeVar("T")
AppFactory = Callable[[], Any]  # returns an aiohttp.web.Application; called inside the loop

_BACKLOG = 1024  # the default (128 in aiohttp, 5 in http.server) stalls concurrency benchmarks


async def _start_site(app: Any, host: str, port: int, grace_s: float = 2.0) -> tuple[Any, str]:
    from aiohttp import web

    # in-flight calls get `grace_s` to finish when the server stops (aiohttp's default is 60 s)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=grace_s)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=_BACKLOG, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise InfraError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="pick another --port, or 0 for any free port") from exc
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return runner, f"http://{shown}:{bound_port}"


class BackgroundServer:
    """An aiohttp app served from a daemon thread that owns its own event loop."""

    def __init__(self, app_factory: AppFactory, *, host: str = "127.0.0.1", port: int = 0,
                 name: str = "orchard-server", grace_s: float = 2.0) -> None:
        self._factory = app_factory
        self._grace = grace_s
        self._host, self._port, self._name = host, port, name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self.app: Any = None
        self.url: str | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise InfraError(f"{self._name} is not running")
        return self._loop

    def start(self, timeout: float = 30.0) -> str:
        """Start serving; returns the root URL (http://host:port)."""
        if self.url:
            return self.url
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                self.app = self._factory()
                self._runner, self.url = loop.run_until_complete(
                    _start_site(self.app, self._host, self._port, self._grace))
            except BaseException as exc:  # handed to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            # Requests still in flight (a harness killed mid-call) would otherwise be destroyed
            # pending, and asyncio prints a traceback for each at exit.
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=main, name=self._name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise InfraError(f"{self._name} did not start within {timeout:.0f} s")
        if failure:
            self._thread.join(5)
            self._loop = None
            raise failure[0]
        assert self.url is not None
        return self.url

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        """Run a coroutine on the server's loop from another thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is None or self._thread is None:
            return
        loop, self._loop = self._loop, None
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout)
        self._thread = None
        self.url = None


class LoopbackEndpoint:
    """A model endpoint served from this process on loopback (a `ModelEndpoint`).

    Subclasses give `app()` (the aiohttp application; called on the server's loop), `info(root)`
    (the EndpointInfo for a root URL http://host:port), and may set `server_name` and `grace_s`
    (how long in-flight calls get when the server stops). Starting twice returns the same info.
    """

    server_name = "orchard-server"
    grace_s = 2.0

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, key_env: str | None = None) -> None:
        self._host, self._port = host, port
        self.key_env = key_env
        self._server: BackgroundServer | None = None

    def app(self) -> Any:
        raise NotImplementedError

    def info(self, root: str) -> EndpointInfo:
        raise NotImplementedError

    @property
    def url(self) -> str | None:
        """The root URL (http://host:port) while serving, else None."""
        return self._server.url if self._server is not None else None

    def start(self) -> EndpointInfo:
        if self._server is None:
            server = BackgroundServer(self.app, host=self._host, port=self._port, name=self.server_name,
                                      grace_s=self.grace_s)
            server.start()
            self._server = server
        assert self._server.url is not None
        return self.info(self._server.url)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def api_key(self) -> str | None:
        return read_key(self.key_env)

    def __enter__(self) -> EndpointInfo:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_foreground(app_factory: AppFactory, *, host: str, port: int,
                   on_ready: Callable[[str], Awaitable[None] | None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then clean up (the app's on_cleanup hooks run)."""

    async def main() -> None:
        runner, url = await _start_site(app_factory(), host, port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            if on_ready is not None:
                result = on_ready(url)
                if asyncio.iscoroutine(result):
                    await result
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())
