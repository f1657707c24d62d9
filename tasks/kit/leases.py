"""Running things an episode leases and gives back: service sets, started once, reused warm.

A family that needs services outside the sandbox (claw's mail and calendar servers, a Claw-Eval
task's mock services) leases a set in `sandbox_spec` and gives it back in `release`; the next
episode that asks for the same `key` gets it again (the family resets it to its task), so a run
starts one set per worker, not one per attempt. A set whose `failed()` says something is stopped,
never handed out again. `close()` (the run is over, or stopping) stops every set and refuses new
leases; a family starts its next run with a new pool.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Generic, Protocol, TypeVar


OWNER = "owner"


def set_folder(kind: str, prefix: str) -> Path:
    """A new folder for a set under ORCHARD_HOME/<kind>, marked with this process's pid. Folders
    whose process is gone (a run killed with -9 never removed its own) are removed first."""
    from orchard_cli.home import state_dir

    root = state_dir(kind)
    from orchard_cli.env.owner import current_owner, owner_alive

    for mark in root.glob(f"*/{OWNER}"):
        try:
            owner = mark.read_text().strip()
        except OSError:
            continue
        if owner and not owner_alive(owner):  # host:pid:start; another host's folder is left alone
            shutil.rmtree(mark.parent, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    (folder / OWNER).write_text(current_owner())
    return folder


class Leasable(Protocol):
    def failed(self) -> str | None:
        """None while the set is alive and answers, else why not."""

    def stop(self) -> None:
        """Stop everything the set runs; idempotent."""


T = TypeVar("T", bound=Leasable)


class LeasePool(Generic[T]):
    """Thread-safe. `keep`: free sets kept at most (the oldest beyond it are stopped)."""

    def __init__(self, prefix: str = "lease", keep: int = 8) -> None:
        self.prefix, self.keep = prefix, keep
        self._lock = threading.Lock()
        self._free: list[tuple[Hashable, T]] = []
        self._leased: dict[str, tuple[Hashable, T]] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self.started = 0
        """How many sets were started (cold) over the pool's life: for benchmarks and tests."""

    def lease(self, key: Hashable, start: Callable[[], T]) -> tuple[str, T]:
        """A running set for `key`: a free one, or one `start()` makes now (cold)."""
        chosen = None
        while chosen is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the run is stopping: no new service sets")
                found = next((i for i, (k, _) in enumerate(self._free) if k == key), None)
                if found is None:
                    break
                chosen = self._free.pop(found)[1]
            try:
                dead = chosen.failed()
            except Exception as exc:  # noqa: BLE001 - a set that cannot say is not handed out
                dead = f"{type(exc).__name__}: {exc}"
            if dead:  # died while it waited: never handed out
                chosen.stop()
                chosen = None
        if chosen is None:
            chosen = start()
            atexit.register(chosen.stop)
            with self._lock:
                self.started += 1
                closed = self._closed
            if closed:  # closed while this set was starting
                chosen.stop()
                raise RuntimeError("the run is stopping: no new service sets")
        lease = f"{self.prefix}-{next(self._ids)}"
        with self._lock:
            self._leased[lease] = (key, chosen)
        return lease, chosen

    def get(self, lease: str) -> T:
        with self._lock:
            found = self._leased.get(lease)
        if found is None:
            raise RuntimeError(f"no service set leased as {lease!r}")
        return found[1]

    def give_back(self, lease: str) -> None:
        with self._lock:
            found = self._leased.pop(lease, None)
        if found is None:
            return
        key, services = found
        if self._closed or services.failed():
            services.stop()
            return
        with self._lock:
            self._free.append((key, services))
            extra, self._free = self._free[:-self.keep], self._free[-self.keep:]
        for _, old in extra:
            old.stop()

    def close(self) -> None:
        """Stop every set (leased ones included: their episodes are over or being stopped) and
        refuse new leases from now on."""
        with self._lock:
            self._closed = True
            every = [s for _, s in self._free] + [s for _, s in self._leased.values()]
            self._free, self._leased = [], {}
        for services in every:
            services.stop()
