"""Service sets for claw episodes: started once (cold), leased per episode, reset to the task's
fixture before each attempt (warm), stopped when the run ends.

Each concurrent episode holds its own set (SMTP, IMAP, CalDAV/CardDAV on the host's loopback), so
two workers use two sets; a set whose server died is stopped, not handed out again.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from orchard_cli.home import state_dir


class ServicePool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[Any] = []
        self._leased: dict[str, Any] = {}
        self._roots: dict[int, Path] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self.started = 0
        """How many sets were started (cold) over the pool's life: for benchmarks and tests."""

    def lease(self) -> tuple[str, Any]:
        """A running set of services (started now when none is free) and its lease id."""
        from orchard_cli.tasks.claw.services import ClawServices

        with self._lock:
            if self._closed:
                raise RuntimeError("the run is stopping: no new service sets")
            services = self._free.pop() if self._free else None
        if services is None:
            root = Path(tempfile.mkdtemp(prefix="services-", dir=state_dir("claw")))
            services = ClawServices(root)
            try:
                services.start()
            except BaseException:
                services.stop()
                shutil.rmtree(root, ignore_errors=True)
                raise
            with self._lock:
                self._roots[id(services)] = root
                self.started += 1
                closed = self._closed
            atexit.register(services.stop)
            if closed:  # closed while this set was starting
                self._stop(services)
                raise RuntimeError("the run is stopping: no new service sets")
        lease = f"svc-{next(self._ids)}"
        with self._lock:
            self._leased[lease] = services
        return lease, services

    def get(self, lease: str) -> Any:
        with self._lock:
            services = self._leased.get(lease)
        if services is None:
            raise RuntimeError(f"no service set leased as {lease!r}")
        return services

    def give_back(self, lease: str) -> None:
        with self._lock:
            services = self._leased.pop(lease, None)
        if services is None:
            return
        if self._closed or services.failed():
            self._stop(services)
            return
        with self._lock:
            self._free.append(services)

    def _stop(self, services: Any) -> None:
        try:
            services.stop()
        finally:
            with self._lock:
                root = self._roots.pop(id(services), None)
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)

    def close(self) -> None:
        """Stop every set (leased ones included: their episodes are over or being stopped) and
        refuse new leases from now on (a new run gets a new pool)."""
        with self._lock:
            self._closed = True
            every = self._free + list(self._leased.values())
            self._free, self._leased = [], {}
        for services in every:
            self._stop(services)
