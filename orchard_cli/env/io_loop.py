"""One thread that reads every sandbox's pipes and sockets, however many sandboxes there are.

A thread per sandbox channel would cost a thousand threads for a thousand sandboxes; select()
cannot watch a descriptor above 1,024. `watch(fd, on_data, on_end)` hands a readable descriptor
to the process's one loop (epoll through `selectors`): `on_data(bytes)` runs on the loop's thread
for each chunk read, `on_end()` once at end of file or on a read error, after which the loop
forgets the descriptor. `forget(fd)` stops watching before its owner closes it. Callbacks must
not block: they hand the data on (a queue, an event) and return.

Registrations go through a queue the loop drains itself, woken by a pipe, so the selector is only
ever touched by its own thread, in order (a descriptor forgotten, closed and its number reused is
registered afresh).
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
from collections import deque
from typing import Callable

CHUNK = 65536


class IOLoop:
    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._todo: deque[tuple[str, int, Callable[[bytes], None] | None, Callable[[], None] | None]] = deque()
        self._thread = threading.Thread(target=self._run, name="orchard-io", daemon=True)
        self._thread.start()

    def watch(self, fd: int, on_data: Callable[[bytes], None], on_end: Callable[[], None]) -> None:
        self._todo.append(("watch", fd, on_data, on_end))
        self._wake()

    def forget(self, fd: int) -> None:
        self._todo.append(("forget", fd, None, None))
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    def _apply(self) -> None:
        while self._todo:
            op, fd, on_data, on_end = self._todo.popleft()
            try:
                self._selector.unregister(fd)  # a stale registration of a reused number goes first
            except (KeyError, ValueError):
                pass
            if op == "watch":
                try:
                    self._selector.register(fd, selectors.EVENT_READ, (on_data, on_end))
                except (OSError, ValueError):  # closed before the loop got to it
                    if on_end is not None:
                        on_end()

    def _run(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.data is None:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                self._read(key)
            self._apply()

    def _read(self, key: selectors.SelectorKey) -> None:
        on_data, on_end = key.data
        try:
            data = os.read(key.fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            try:
                on_data(data)
            except Exception:  # a reader's bug must not stop every other sandbox's reads
                logging.getLogger("orchard.env").exception("reading fd %d", key.fd)
            return
        try:
            self._selector.unregister(key.fd)
        except (KeyError, ValueError):
            pass
        try:
            on_end()
        except Exception:
            logging.getLogger("orchard.env").exception("closing fd %d", key.fd)


_loop: IOLoop | None = None
_lock = threading.Lock()


def io_loop() -> IOLoop:
    """The process's one loop, started on first use (and again in a forked child)."""
    global _loop
    with _lock:
        if _loop is None or not _loop._thread.is_alive():
            _loop = IOLoop()
        return _loop
