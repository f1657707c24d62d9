"""One thread that reads every sandbox's pipes and sockets, however many sandboxes there are.

A thread per sandbox channel would cost a thousand threads for a thousand sandboxes; select()
cannot watch a descriptor above 1,024. `watch(fd, on_data, on_end, read)` hands a readable
descriptor to the process's one loop (epoll through `selectors`): `on_data(bytes)` runs on the
loop's thread for each chunk read, `on_end()` once at end of file or on a read error, after which
the loop forgets the descriptor. `read()` must never block (a non-blocking pipe, a socket read
with MSG_DONTWAIT): the loop serves every sandbox. Callbacks must not block either: they hand the
data on (a queue, an event) and return.

`forget(fd)` returns once the loop has let go of the descriptor, so its owner may close it right
after: the number can then be reused (the kernel hands out the lowest free one) without the loop
reading someone else's descriptor. Registrations go through a queue the loop drains itself, woken
by a pipe, so the selector is only ever touched by its own thread, in order. Should the loop
itself fail, every descriptor it watched is ended (its waiters are told) and the next use starts
a new loop.
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
import time
from collections import deque
from typing import Callable

CHUNK = 65536
FORGET_WAIT = 30.0

log = logging.getLogger("orchard.env")

_Op = tuple[str, int, "Callable[[bytes], None] | None", "Callable[[], None] | None",
            "Callable[[], bytes] | None", "threading.Event | None"]


class IOLoop:
    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._todo: deque[_Op] = deque()
        self._thread = threading.Thread(target=self._run, name="orchard-io", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def watch(self, fd: int, on_data: Callable[[bytes], None], on_end: Callable[[], None],
              read: Callable[[], bytes] | None = None) -> None:
        self._todo.append(("watch", fd, on_data, on_end, read, None))
        self._wake()

    def forget(self, fd: int) -> None:
        """Stop watching `fd`; returns when the loop no longer reads it."""
        if threading.current_thread() is self._thread:
            self._unregister(fd)
            return
        done = threading.Event()
        self._todo.append(("forget", fd, None, None, None, done))
        self._wake()
        deadline = time.monotonic() + FORGET_WAIT
        while not done.wait(0.5):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                return  # a dead loop reads nothing

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    def _unregister(self, fd: int) -> None:
        try:
            self._selector.unregister(fd)
        except (KeyError, ValueError):
            pass

    def _apply(self) -> None:
        while self._todo:
            op, fd, on_data, on_end, read, done = self._todo.popleft()
            self._unregister(fd)  # a stale registration of a reused number goes first
            if op == "watch":
                try:
                    self._selector.register(fd, selectors.EVENT_READ, (on_data, on_end, read))
                except (OSError, ValueError):  # closed before the loop got to it
                    self._end(fd, on_end)
            if done is not None:
                done.set()

    def _run(self) -> None:
        try:
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
        except BaseException:  # the loop is gone: its descriptors' waiters must not wait forever
            log.exception("the IO loop failed; ending what it watched")
            for key in list(self._selector.get_map().values()):
                if key.data is not None:
                    self._end(key.fd, key.data[1])
            while self._todo:
                _, fd, _, on_end, _, done = self._todo.popleft()
                if on_end is not None:
                    self._end(fd, on_end)
                if done is not None:
                    done.set()

    def _read(self, key: selectors.SelectorKey) -> None:
        on_data, on_end, read = key.data
        try:
            data = read() if read is not None else os.read(key.fd, CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            try:
                on_data(data)
            except Exception:  # a reader's bug must not stop every other sandbox's reads
                log.exception("reading fd %d", key.fd)
            return
        self._unregister(key.fd)
        self._end(key.fd, on_end)

    @staticmethod
    def _end(fd: int, on_end: Callable[[], None] | None) -> None:
        if on_end is None:
            return
        try:
            on_end()
        except Exception:
            log.exception("closing fd %d", fd)


_loop: IOLoop | None = None
_lock = threading.Lock()


def _forget_in_child() -> None:
    """A forked child has none of the parent's threads: its first use starts its own loop."""
    global _loop, _lock
    _loop, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def io_loop() -> IOLoop:
    """The process's one loop, started on first use (and again should it have failed)."""
    global _loop
    with _lock:
        if _loop is None or not _loop.alive():
            _loop = IOLoop()
        return _loop
