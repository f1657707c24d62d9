"""`WebApps`: the web-mini sites (shop, wiki, mail, booking) as one process on 127.0.0.1, one
port per site, and the host's only way to reset them and read their state: JSON lines over the
process's stdin/stdout (server.py). The process ends with the one that started it (the kit's guard).

    apps = WebApps(root); apps.start()
    apps.reset({"seed": 1001, "shop": {"cart": [...]}})      # every site to the fixture, the log emptied
    apps.origins()["shop"]                                     # http://127.0.0.1:PORT
    apps.query("shop", "SELECT sku, qty FROM cart")            # read-only rows
    apps.requests(); apps.snapshot(); apps.stop()
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import orchard_cli
from orchard_cli.errors import InfraError, UsageError
from orchard_cli.tasks.kit import guard

SITES = ("shop", "wiki", "mail", "booking")
START_TIMEOUT = 30.0
CALL_TIMEOUT = 30.0
_PACKAGE_ROOT = str(Path(orchard_cli.__file__).resolve().parents[1])


class WebApps:
    """The apps' process and its control channel; every method is safe from any thread."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._proc: subprocess.Popen | None = None
        self._guard: guard.Guard | None = None
        self._ports: dict[str, int] = {}
        self._lock = threading.RLock()
        self._buffer = b""
        self._next = 0

    @property
    def _log_path(self) -> Path:
        return self.root / "logs" / "apps.log"

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the process and wait until every site listens (then reset to the default fixture)."""
        with self._lock:
            if self._proc is not None:
                return
            (self.root / "logs").mkdir(parents=True, exist_ok=True)
            self._guard = guard.Guard()
            env = {**os.environ, "PYTHONUNBUFFERED": "1", **self._guard.env(),
                   "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
            with open(self._log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    guard.command("orchard_cli.tasks.web.apps.server", "--root", str(self.root / "sites")),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=self.root, env=env,
                    pass_fds=(self._guard.fd,))
            self._buffer = b""
            try:
                hello = self._read(START_TIMEOUT)
                if not hello.get("ready"):
                    raise InfraError(f"the web apps did not start: {hello}")
                self._ports = {site: int(port) for site, port in hello["ports"].items()}
                self.reset({})
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        """End the process (stdin closed, then terminate, then kill); safe to call twice."""
        with self._lock:
            proc, self._proc = self._proc, None
            held, self._guard = self._guard, None
            self._ports = {}
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                guard.end(proc)
        if held is not None:
            held.close()

    def failed(self) -> str | None:
        """None when the process is alive and answers; else one line saying what is wrong."""
        with self._lock:
            if self._proc is None:
                return "the web apps are not started"
            if self._proc.poll() is not None:
                return self._death()
            try:
                self._call({"op": "ping"}, timeout=5)
            except InfraError as exc:
                return exc.message
        return None

    def _death(self) -> str:
        code = self._proc.returncode if self._proc else None
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        return f"the web apps process {how}: {self._last_words()}"

    def _last_words(self) -> str:
        try:
            lines = [ln for ln in self._log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        return lines[-1][:300] if lines else "no output"

    # --- the contract ---------------------------------------------------------------------------
    def ports(self) -> dict[str, int]:
        return dict(self._ports)

    def origins(self) -> dict[str, str]:
        return {site: f"http://127.0.0.1:{port}" for site, port in self._ports.items()}

    def reset(self, fixture: dict[str, Any]) -> None:
        """Every site to `fixture` (see fixture.py), the request log emptied. A bad fixture is a
        UsageError naming where it is wrong (the sites then answer 503 until a good reset)."""
        self._call({"op": "reset", "fixture": fixture}, usage=True)

    def query(self, site: str, sql: str) -> list[list[Any]]:
        """The rows of a read-only SQL query over the site's database (mail: a `messages` table
        built from the Maildir: mailbox, id, sender, sender_addr, to_addrs, cc_addrs, subject,
        body, date, unread, in_reply_to)."""
        return self._call({"op": "query", "site": site, "sql": sql}, usage=True)

    def requests(self) -> list[dict[str, Any]]:
        """Every HTTP request since the reset: site, method, path, query, form, status, at."""
        return self._call({"op": "requests"})

    def snapshot(self) -> dict[str, Any]:
        """A small summary of every site's state, for a person to diff."""
        return self._call({"op": "snapshot"})

    # --- the channel ----------------------------------------------------------------------------
    def _call(self, message: dict[str, Any], *, usage: bool = False, timeout: float = CALL_TIMEOUT) -> Any:
        with self._lock:
            if self._proc is None or self._proc.stdin is None:
                raise InfraError("the web apps are not started (call start() first)")
            self._next += 1
            ident = self._next
            try:
                self._proc.stdin.write((json.dumps({**message, "id": ident}) + "\n").encode())
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise InfraError(self._death() if self._proc.poll() is not None else
                                 "the web apps' control channel is closed") from None
            while True:
                reply = self._read(timeout)
                if reply.get("id") == ident:
                    break
        if reply.get("ok"):
            return reply.get("result")
        error = f"web apps {message['op']}: {reply.get('error')}"
        raise UsageError(error) if usage else InfraError(error)

    def _read(self, timeout: float) -> dict[str, Any]:
        """The next JSON line from the process (a missing one, or its death, is an InfraError)."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise InfraError(f"the web apps did not answer within {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    raise InfraError("the web apps closed their control channel") from None
                raise InfraError(self._death())
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)
