"""Starting a local sandbox's bwrap process, and keeping the tail of what it prints.

bwrap's `--die-with-parent` follows the *thread* that forked it, so every sandbox is spawned from
one long-lived thread. bwrap's own pid 1 only ever holds /dev/null and the diagnostics pipe,
drained by the process's IO loop into a short tail (the reason a sandbox did not start).
"""

from __future__ import annotations

import os
import subprocess
import threading

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


class OutputTail:
    """The last few KB of a process's combined output, read by the process's one IO loop
    (io_loop.py) so it never piles up, and no thread per sandbox waits on it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        from orchard_cli.env.io_loop import io_loop

        self.proc = proc
        self._tail = bytearray()
        self._ended = threading.Event()
        os.set_blocking(proc.stdout.fileno(), False)  # only the loop reads it, and it must not wait
        io_loop().watch(proc.stdout.fileno(), self._add, self._ended.set)

    def _add(self, data: bytes) -> None:
        self._tail += data
        del self._tail[:-TAIL_BYTES]

    def wait(self, timeout: float) -> None:
        """Until the output ended (the process and its children closed it), or `timeout`."""
        self._ended.wait(timeout)

    def text(self) -> str:
        return self._tail.decode(errors="replace")[-600:].strip() or "no output"
