"""The host's end of the conversation with a sandbox runner (`local_runner.py`), for every backend
that runs one (local, docker).

The runner connects back to a Unix socket that accepts exactly one connection, made before any
command exists in the sandbox (on docker, an image's later sandboxes take it at their first
command, which waits for it), and then disappears. The runner makes itself non-dumpable, so no
process in the sandbox can reach the channel through /proc/<pid>/fd and forge a result.
Requests are length-prefixed marshal frames; replies are JSON lines:

- a command (`call`): one request, one reply, matched by id;
- a stream (`open_stream`: a PTY session): one request, then any number of events with that id
  (`out`, then `exit` or `error`), while `send` carries its input (stdin, resize, signals).

No `select()` anywhere: a sandbox count in the thousands means file descriptors above 1024; and no
thread per sandbox: every channel's replies are read by the process's one IO loop (io_loop.py).
"""

from __future__ import annotations

import json
import marshal
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from orchard_cli.env.io_loop import CHUNK, io_loop
from orchard_cli.errors import SandboxError


def bind_unix(path: Path, backlog: int = 64, mode: int | None = None) -> socket.socket:
    """A listening Unix socket at `path`, however long the path (bound through /proc/self/fd)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        server.bind(f"/proc/self/fd/{dir_fd}/{path.name}")
        server.listen(backlog)
        if mode is not None:
            os.chmod(path, mode)
    except OSError as exc:
        server.close()
        raise SandboxError(f"cannot make the socket {path}: {exc}") from exc
    finally:
        os.close(dir_fd)
    return server


class Stream:
    """The events of one streamed session (a PTY), in order, ending with `exit` or `error`."""

    def __init__(self, channel: "RunnerChannel", sid: int) -> None:
        self.channel, self.sid = channel, sid
        self.events: queue.Queue[dict] = queue.Queue()

    def get(self, timeout: float | None = None) -> dict | None:
        """The next event, or None when none came within `timeout`."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def send(self, op: str, **fields: object) -> None:
        """Input for the session (`pty_in`, `pty_resize`, `pty_signal`, `pty_close`); never waits."""
        try:
            self.channel.send({"op": op, "sid": self.sid, **fields})
        except OSError:
            pass


class RunnerChannel:
    """One sandbox runner's channel. `diagnostics()` says why the runner is gone (a log tail)."""

    def __init__(self, socket_path: Path, diagnostics: Callable[[], str], *, socket_mode: int | None = None) -> None:
        self.path = socket_path
        self.listener: socket.socket | None = bind_unix(socket_path, backlog=1, mode=socket_mode)
        self.diagnostics = diagnostics
        self.hello: dict = {}
        self.dead: str | None = None
        self.conn: socket.socket | None = None
        self.ready = False
        """The runner has its config, said hello and is read by the IO loop: commands may go."""
        self._pending: dict[int, list] = {}
        self._streams: dict[int, Stream] = {}
        self._next = 0
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._buffer = bytearray()

    def accept(self, config: dict, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
        """Take the runner's connection (False if it has not come within `timeout` while `alive()`),
        hand it its config, read its hello and start reading replies."""
        deadline = time.monotonic() + timeout
        while self.conn is None:
            listener = self.listener
            if listener is None or self.dead:  # closed: the sandbox is being destroyed
                return False
            try:
                listener.settimeout(max(0.0, min(0.05, deadline - time.monotonic())))
                conn, _ = listener.accept()
            except (TimeoutError, BlockingIOError, socket.timeout):
                if time.monotonic() >= deadline or not alive():
                    return False
                continue
            except OSError:
                if self.listener is None or self.dead:  # closed by another thread meanwhile
                    return False
                raise
            if self.dead:  # destroyed while it connected: close() did not see this connection
                conn.close()
                return False
            self.conn = conn
        try:
            self._close_listener()
            self.conn.settimeout(max(deadline - time.monotonic(), 5.0))
            self.send(config)
            line = self._hello_line()
            self.conn.settimeout(None)
            self.hello = json.loads(line) if line else {}
            if not self.hello.get("ready"):
                raise SandboxError(f"the sandbox runner did not say hello: {self.diagnostics()}")
        except BaseException:
            self.dead = self.dead or "the sandbox runner did not start"
            self.close()  # a runner that did not start is not asked again
            raise
        if self._buffer:
            self._on_data(b"")  # replies that came with the hello, before the loop reads more
        conn = self.conn
        io_loop().watch(conn.fileno(), self._on_data, self._on_end,
                        read=lambda: conn.recv(CHUNK, socket.MSG_DONTWAIT))  # never blocks the loop
        self.ready = True
        return True

    def _hello_line(self) -> bytes:
        """The runner's first line; what follows it stays in the buffer for the loop."""
        assert self.conn is not None
        while b"\n" not in self._buffer:
            try:
                data = self.conn.recv(65536)
            except (OSError, TimeoutError):
                return b""
            if not data:
                return b""
            self._buffer += data
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return line

    def _close_listener(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def send(self, frame: dict) -> None:
        data = marshal.dumps(frame, 2)
        with self._write_lock:
            if self.conn is None:
                raise OSError("no runner connection")
            self.conn.sendall(len(data).to_bytes(4, "big") + data)

    def _register(self, frame: dict) -> int:
        with self._lock:
            self._next += 1
            frame["id"] = self._next
            return self._next

    def call(self, frame: dict, timeout: float) -> dict:
        """Send one request and wait for its one reply ({"error": ...} when there is none)."""
        slot: list = [threading.Event(), None]
        with self._lock:
            if self.dead:
                return {"error": self.dead}
            self._next += 1
            frame["id"] = self._next
            self._pending[self._next] = slot
        try:
            self.send(frame)
        except OSError as exc:
            return {"error": f"sandbox runner is gone ({exc.strerror or exc})"}
        if not slot[0].wait(timeout):
            with self._lock:
                self._pending.pop(frame["id"], None)
            return {"error": f"sandbox runner did not answer within {timeout:.0f}s"}
        return slot[1]

    def open_stream(self, frame: dict) -> Stream:
        """Start a streamed session; its events arrive on the returned Stream."""
        with self._lock:
            if self.dead:
                raise SandboxError(self.dead)
            self._next += 1
            frame["id"] = self._next
            stream = self._streams[self._next] = Stream(self, self._next)
        try:
            self.send(frame)
        except OSError as exc:
            with self._lock:
                self._streams.pop(stream.sid, None)
            raise SandboxError(f"sandbox runner is gone ({exc.strerror or exc})") from exc
        return stream

    def _on_data(self, data: bytes) -> None:
        """Replies as the process's IO loop reads them (io_loop.py): whole lines are dispatched."""
        self._buffer += data
        if b"\n" not in data and data:
            return
        *lines, rest = bytes(self._buffer).split(b"\n")
        self._buffer = bytearray(rest)
        for line in lines:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if isinstance(reply, dict):
                self._dispatch(reply)

    def _dispatch(self, reply: dict) -> None:
        key = reply.get("id")
        with self._lock:
            stream = self._streams.get(key)
            if stream is not None and ("exit" in reply or "error" in reply):
                self._streams.pop(key, None)
            slot = None if stream is not None else self._pending.pop(key, None)
        if stream is not None:
            stream.events.put(reply)
        elif slot:
            slot[1] = reply
            slot[0].set()

    def _on_end(self) -> None:
        with self._lock:
            self.dead = self.dead or f"sandbox runner exited: {self.diagnostics()}"
            pending, self._pending = self._pending, {}
            streams, self._streams = self._streams, {}
        for slot in pending.values():
            slot[1] = {"error": self.dead}
            slot[0].set()
        for stream in streams.values():
            stream.events.put({"id": stream.sid, "error": self.dead})

    def close(self) -> None:
        self.dead = self.dead or "sandbox destroyed"
        self._close_listener()
        if self.conn is not None:
            io_loop().forget(self.conn.fileno())  # so no end of file comes: the waiters are told here
            for step in (lambda: self.conn.shutdown(socket.SHUT_RDWR), self.conn.close):
                try:
                    step()
                except OSError:
                    pass
        self._on_end()
