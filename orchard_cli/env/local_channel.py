"""The backend's end of the conversation with one sandbox runner (`local_runner.py`).

The runner connects back to a Unix socket that accepts exactly one connection, made before any
command exists in the sandbox, and then disappears. The runner makes itself non-dumpable, so no
process in the sandbox can reach the channel through /proc/<pid>/fd and forge a result (bwrap's
own pid 1 only ever holds /dev/null and the diagnostics pipe, drained here into a short tail).
Requests are length-prefixed marshal frames; replies are JSON lines, matched to callers by id.
"""

from __future__ import annotations

import json
import marshal
import os
import select
import socket
import subprocess
import threading
import time
from pathlib import Path

from orchard_cli.errors import SandboxError

TAIL_BYTES = 4096
_spawn_lock = threading.Lock()
_spawner = None


def spawn(argv: list[str], **kwargs) -> subprocess.Popen:
    """Popen from one long-lived thread: --die-with-parent follows the *thread* that forked."""
    global _spawner
    with _spawn_lock:
        if _spawner is None:
            from concurrent.futures import ThreadPoolExecutor

            _spawner = ThreadPoolExecutor(1, thread_name_prefix="orchard-local-spawner")
    return _spawner.submit(subprocess.Popen, argv, **kwargs).result()


def bind_unix(path: Path, backlog: int = 64) -> socket.socket:
    """A listening Unix socket at `path`, however long the path (bound through /proc/self/fd)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        server.bind(f"/proc/self/fd/{dir_fd}/{path.name}")
        server.listen(backlog)
    except OSError as exc:
        server.close()
        raise SandboxError(f"cannot make the socket {path}: {exc}") from exc
    finally:
        os.close(dir_fd)
    return server


class Channel:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.hello: dict = {}
        self.dead: str | None = None
        self.conn: socket.socket | None = None
        self._tail = bytearray()
        self._pending: dict[int, list] = {}
        self._next = 0
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._drainer = threading.Thread(target=self._drain, daemon=True,
                                         name=f"orchard-local-diag-{proc.pid}")
        self._drainer.start()

    def connect(self, listener: socket.socket, config: dict, timeout: float) -> None:
        """Accept the runner's one connection, send its config and wait for its hello."""
        deadline = time.monotonic() + timeout
        try:
            while self.conn is None:
                if select.select([listener], [], [], 0.01)[0]:
                    self.conn, _ = listener.accept()
                elif self.proc.poll() is not None or time.monotonic() > deadline:
                    self._drainer.join(1)
                    raise SandboxError(f"local sandbox did not start: {self.tail()}")
        finally:
            listener.close()
        self.conn.settimeout(max(deadline - time.monotonic(), 0.1))
        self.send(config)
        reader = self.conn.makefile("rb")
        line = reader.readline()
        self.conn.settimeout(None)
        self.hello = json.loads(line) if line else {}
        if not self.hello.get("ready"):
            raise SandboxError(f"local sandbox runner did not say hello: {self.tail()}")
        threading.Thread(target=self._read, args=(reader,), daemon=True,
                         name=f"orchard-local-{self.proc.pid}").start()

    def send(self, frame: dict) -> None:
        data = marshal.dumps(frame, 2)
        with self._write_lock:
            self.conn.sendall(len(data).to_bytes(4, "big") + data)

    def call(self, frame: dict, timeout: float) -> dict:
        slot = [threading.Event(), None]
        with self._lock:
            self._next += 1
            frame["id"] = self._next
            self._pending[self._next] = slot
            dead = self.dead
        if dead:
            return {"error": dead}
        try:
            self.send(frame)
        except OSError as exc:
            return {"error": f"sandbox runner is gone ({exc.strerror or exc})"}
        if not slot[0].wait(timeout):
            return {"error": f"sandbox runner did not answer within {timeout:.0f}s"}
        return slot[1]

    def _read(self, reader) -> None:
        try:
            for line in reader:
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                with self._lock:
                    slot = self._pending.pop(reply.get("id"), None)
                if slot:
                    slot[1] = reply
                    slot[0].set()
        except OSError:
            pass
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            code = "still running"
        with self._lock:
            self.dead = f"sandbox runner exited (status {code}): {self.tail()}"
            pending, self._pending = self._pending, {}
        for slot in pending.values():
            slot[1] = {"error": self.dead}
            slot[0].set()

    def _drain(self) -> None:
        """Keep the last few KB of bwrap's and the runner's diagnostics; never let them pile up."""
        while True:
            try:
                data = os.read(self.proc.stdout.fileno(), 65536)
            except (OSError, ValueError):
                return
            if not data:
                return
            self._tail += data
            del self._tail[:-TAIL_BYTES]

    def tail(self) -> str:
        return self._tail.decode(errors="replace")[-600:].strip() or "no output"

    def close(self) -> None:
        if self.conn is not None:
            for step in (lambda: self.conn.shutdown(socket.SHUT_RDWR), self.conn.close):
                try:
                    step()
                except OSError:
                    pass
