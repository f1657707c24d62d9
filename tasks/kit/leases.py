"""Running things an episode leases and gives back: service sets, started once, reused warm.

A family that needs services outside the sandbox (claw's mail and calendar servers, the web apps
and their browser, a Claw-Eval task's mock services) leases a set in its episode's `spec`
(`LeasedEpisode.take`) and gives it back when the episode ends; the next episode that asks for the
same `key` gets it again (the family resets it to its task), so a run starts one set per worker,
not one per attempt. A set whose `failed()` says something is stopped, never handed out again. `close()` (the run is over, or stopping) stops every set and refuses new
leases; a family starts its next run with a new pool.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from orchard_cli.family import BaseEpisode, BaseFamily, RunOptions, Task


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


# ---- families over leased sets (seam version 2) -------------------------------------------------
# The episode owns what it leased: no family-wide state keyed by sandbox id.

@contextmanager
def infra_failures() -> Iterator[None]:
    """A leased set (a browser, an app server, services) that fails under a step of the episode
    ends it as infra_error: a set that died is not the task's environment failing."""
    from orchard_cli.errors import InfraError
    from orchard_cli.outcome import EpisodeFailure

    try:
        yield
    except (InfraError, OSError) as exc:
        raise EpisodeFailure("infra_error", f"its leased set failed: {exc}") from exc


class LeasedFamily(BaseFamily):
    """A family whose episodes lease a running set outside the sandbox. The pool lives for the run
    (a set per worker, reset between episodes); every set stops when the run is over, and the
    next run of the family gets a new pool."""

    lease_label: ClassVar[str] = ""
    """The sandbox label holding the lease id (default `orchard.<family>.lease`)."""

    def __init__(self) -> None:
        self.pool = self.new_pool()

    def new_pool(self) -> Any:
        """A new LeasePool of the family's sets (default: a `LeasePool` named after the family)."""
        return LeasePool(prefix=self.name or "lease")

    def close(self, *, interrupted: bool = False) -> None:
        if interrupted:  # episodes still starting are refused a set (infra_error: interrupted)
            self.pool.close()
            return
        pool, self.pool = self.pool, self.new_pool()
        pool.close()


class LeasedEpisode(BaseEpisode):
    """An episode holding a leased set: taken in `spec` (`take`), its tool session made once
    (`session_for`), closed before the evidence is read (`collect` ends it and keeps its
    dispatches), the set given back on exit."""

    tool_label: ClassVar[str] = "a tool call"
    """What one of the episode's tool calls is, in the failure of one still running at the end."""

    def __init__(self, family: LeasedFamily, task: Task, options: RunOptions) -> None:
        super().__init__(task, options)
        self.family = family
        self.lease: str | None = None
        self.owned: Any = None
        """The leased set (its services, its browser), once `spec` took one."""
        self.session: Any = None
        """The episode's ToolSession, once `tools` made it."""
        self._lock = threading.Lock()

    def take(self, lease: Callable[[], tuple[str, Any]]) -> Any:
        """Lease a set (`lease()` -> (id, set)): a set that cannot be had is infra_error. A set
        taken before (a second `spec`: its sandbox is gone) is given back first, so an episode
        never holds two sets of a pool sized to the run's workers."""
        self.give_back()
        with infra_failures():
            self.lease, self.owned = lease()
        return self.owned

    def labels(self) -> dict[str, str]:
        """The spec labels of this episode's sandbox (its family, its lease)."""
        label = self.family.lease_label or f"orchard.{self.family.name}.lease"
        return {"orchard.family": self.family.name, label: self.lease or ""}

    def session_for(self, make: Callable[[], Any]) -> Any:
        """The episode's tool session: made by `make()` on the first call, the same one after."""
        with self._lock:
            if self.session is None:
                self.session = make()
            return self.session

    def end_tools(self) -> None:
        """No call may land after this: the session closes, waiting for calls in flight; one
        still running is the episode's infrastructure failing, not the agent. Idempotent (a
        second call does not wait again for a call still running)."""
        if self.session is not None and not self.session.closed and not self.session.close():
            self.session.failure = self.session.failure or f"{self.tool_label} was still running when the episode ended"

    def collect(self, solution: Any, sandbox: Any) -> Any:
        """The harness's evidence; in the episode itself (a sandbox), the tools end first and
        their calls, in order, are its dispatches. A family reads its set's state after this."""
        evidence = super().collect(solution, sandbox)
        if sandbox is not None:
            self.end_tools()
            if self.session is not None:
                evidence.dispatches = self.session.dispatches
        return evidence

    def failure(self) -> str | None:
        """Why the episode's leased set failed (it died, a tool call found a service gone), or None."""
        if self.owned is None:
            return None
        return self.owned.failed() or (self.session.failure if self.session is not None else None)

    def give_back(self) -> None:
        """The set goes back to the pool (reset by the next episode that takes it); idempotent."""
        lease, self.lease = self.lease, None
        if lease:
            self.family.pool.give_back(lease)

    def __exit__(self, *exc: object) -> None:
        try:
            self.end_tools()  # an episode that ended early (no collect) lands no call on a set given back
        finally:
            self.give_back()
