"""A browser for web episodes: one Chromium in a bubblewrap jail, driven by Playwright.

`WebBrowser` owns one Chromium process (Debian's headless shell) started inside `bwrap` (its own
/tmp, /dev, /proc and pid namespace; of the host's files it sees /usr and the font and TLS
configuration only, plus the folders a suite names, read-only) and the asyncio loop, on a thread
of its own, that Playwright's async API runs on; every other thread reaches it through `call`.
An episode gets a fresh browser context (`BrowserSession`, actions.py): its own cookies, storage
and tabs, closed when the episode ends, so one browser serves a worker's episodes one after the
other (cold: the process starts; warm: a context opens).

The jail shares the host's network namespace: the local web apps listen on the host's loopback.
What a page may reach is the episode's business: each context routes every request through an
allow-list of origins (actions.py), the rest is blocked and recorded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shlex
import shutil
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from orchard_cli.errors import MissingDependencyError

HEADLESS_SHELL = "/usr/lib/chromium/chromium-headless-shell"
"""Debian's `chromium-headless-shell` (the /usr/bin one is a shell wrapper around this)."""
CHROMIUM = "/usr/lib/chromium/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--metrics-recording-only", "--password-store=basic",
        "--use-mock-keychain", "--mute-audio", "--hide-scrollbars",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--webrtc-ip-handling-policy=disable_non_proxied_udp"]
"""The jail is the sandbox (Chromium's own needs user namespaces it cannot have as root here);
WebRTC may not send UDP around the request routing."""
ETC = ("/etc/fonts", "/etc/ssl", "/etc/ca-certificates", "/etc/alternatives", "/etc/ld.so.cache",
       "/etc/localtime", "/etc/chromium.d", "/etc/mime.types", "/etc/nsswitch.conf", "/etc/hosts",
       "/etc/passwd", "/etc/group")
INSTALL = "apt-get install chromium-headless-shell bubblewrap && pip install playwright==1.65.0"
T = TypeVar("T")


def browser_binary() -> str:
    """The Chromium binary: $ORCHARD_CHROMIUM, else Debian's headless shell or browser, else one
    on PATH (the host prerequisites table's `find_chromium`)."""
    from orchard_cli.prereqs import CHROMIUM_INSTALL, find_chromium

    found = find_chromium()
    if found is None:
        raise MissingDependencyError("no Chromium found for web tasks", hint=CHROMIUM_INSTALL)
    return found


def jail_argv(root: Path, read_only: list[str]) -> list[str]:
    """bwrap's command line, up to the program it runs. `root` (the browser's own folder) is only
    a mark on the command line (ORCHARD_WEB_BROWSER), by which a test or a person finds it."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise MissingDependencyError("bubblewrap (bwrap) is needed to jail the browser", hint=INSTALL)
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
            "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run", "--dir", "/home/web",
            "--setenv", "HOME", "/home/web", "--setenv", "TMPDIR", "/tmp", "--chdir", "/tmp",
            "--setenv", "ORCHARD_WEB_BROWSER", str(root)]
    for path in ETC:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for path in read_only:
        argv += ["--ro-bind", path, path]
    return argv


def jail_script(root: Path, binary: str, read_only: list[str]) -> Path:
    """A launcher Playwright starts as the browser: bwrap, then Chromium with Playwright's own
    arguments (its pipe, fds 3 and 4, passes through)."""
    script = root / "browser-in-jail.sh"
    real = os.path.dirname(os.path.realpath(binary))
    if not real.startswith("/usr/"):  # a Chromium outside /usr (found on PATH, $ORCHARD_CHROMIUM): its folder too
        read_only = [*read_only, real]
    script.write_text("#!/bin/sh\nexec " + shlex.join([*jail_argv(root, read_only), binary]) + ' "$@"\n')
    script.chmod(0o700)
    return script


class WebBrowser:
    """Thread-safe. `start()` launches; `call(coro)` runs a coroutine on the browser's loop."""

    def __init__(self, root: Path, read_only: list[str] | None = None, launch_timeout: float = 60.0) -> None:
        self.root = Path(root)
        self.read_only = [str(p) for p in read_only or []]
        self.launch_timeout = launch_timeout
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._playwright: Any = None
        self.browser: Any = None
        self._failure: str | None = None
        self._lock = threading.Lock()
        self._stopped = False

    # ---- life ----------------------------------------------------------------------------------
    def start(self) -> "WebBrowser":
        try:
            import playwright.async_api  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError("Playwright is not installed", hint=INSTALL) from exc
        script = jail_script(self.root, browser_binary(), self.read_only)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="web-browser", daemon=True)
        self._thread.start()
        try:
            self.call(self._launch(str(script)), timeout=self.launch_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    async def _launch(self, executable: str) -> None:
        from playwright.async_api import async_playwright

        self._playwright = await async_playwright().start()
        self.browser = await self._playwright.chromium.launch(executable_path=executable, args=ARGS,
                                                              handle_sigint=False, handle_sigterm=False)
        self.browser.on("disconnected", lambda _: self._fail("the browser process ended"))

    def _fail(self, why: str) -> None:
        if not self._stopped:
            self._failure = self._failure or why

    @property
    def playwright(self) -> Any:
        """The Playwright driver the browser was launched by (its `request` API, on the browser's loop)."""
        return self._playwright

    def failed(self) -> str | None:
        """None while the browser is alive, else why not."""
        if self._failure:
            return self._failure
        if self.browser is None or not self.browser.is_connected():
            return "the browser is not running"
        return None

    def stop(self) -> None:
        """Close the browser and Playwright, end the loop thread. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        loop = self.loop
        if loop is not None and loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=40)
            except Exception:  # noqa: BLE001 - a dead browser closes as well as it can
                pass
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if loop is not None and not loop.is_running():
            loop.close()

    async def _close(self) -> None:
        for closing in (self.browser, self._playwright):
            if closing is None:
                continue
            try:
                await asyncio.wait_for(closing.close() if closing is self.browser else closing.stop(), 15)
            except Exception:  # noqa: BLE001
                pass

    # ---- calls from other threads ----------------------------------------------------------------
    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run `coro` on the browser's loop and wait for it. A dead browser or a call that outlives
        `timeout` raises ConnectionError (an OSError: the tool surface reads it as a service gone)."""
        loop = self.loop
        if loop is None or not loop.is_running() or self._stopped:
            coro.close()
            raise ConnectionError("the browser is not running")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise ConnectionError(f"the browser did not answer within {timeout:g} s") from exc
