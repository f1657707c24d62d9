"""Version-1 families whose episodes lease a running set outside the sandbox (tasks/kit/leases.py):
Claw-Eval's mock services. What they share, declared once. (Claw, web, miniwob and live-web are on
the version-2 seam: `tasks.kit.leases.LeasedFamily`/`LeasedEpisode` keep this state on the
episode; this module goes when Claw-Eval has moved.)

    sandbox_spec   leases a set from `self.pool` and labels the spec with `lease_label`
    live(sandbox)  the episode's `Live` (its lease, its tool session) and the set it leased, from
                   any hook that has the sandbox
    end_tools      collect's first step: the tool session closes (calls in flight waited for)
    release        the episode's `Live` goes, the set goes back
    close          the run is over: every set stops; the next run gets a new pool
    interrupt      the run is stopping: sets stop, episodes still starting are refused one
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar

from orchard_cli.tasks.base import FamilyBase, Task


@dataclass
class Live:
    """One episode's share of its leased set."""

    lease: str
    session: Any = None
    """The episode's ToolSession, once `tools` made it."""
    episode: Any = None
    """A browser episode (web families), closed when the set is given back."""
    started: Any = None
    """What the family's setup started (MiniWoB's episode: seed, utterance)."""


class LeasedFamily(FamilyBase):
    lease_label: ClassVar[str] = ""
    """The sandbox label holding the lease id (`orchard.<family>.lease`)."""

    def __init__(self) -> None:
        self.pool = self.new_pool()
        self._live: dict[str, Live] = {}
        self._lock = threading.Lock()

    def new_pool(self) -> Any:
        """A new LeasePool of the family's sets."""
        raise NotImplementedError

    def labels(self, lease: str) -> dict[str, str]:
        """The spec labels of a sandbox that holds `lease`."""
        return {"orchard.family": self.name, self.lease_label: lease}

    def leased(self, sandbox: Any) -> bool:
        return bool(sandbox.info.spec.labels.get(self.lease_label))

    def live(self, sandbox: Any) -> tuple[Live, Any]:
        """The episode's Live and the set its sandbox's spec leased."""
        lease = sandbox.info.spec.labels.get(self.lease_label, "")
        with self._lock:
            live = self._live.setdefault(sandbox.id, Live(lease=lease))
        return live, self.pool.get(lease)

    def session_for(self, live: Live, make: Any) -> Any:
        """The episode's tool session: made by `make()` on the first call, the same one after."""
        with self._lock:
            if live.session is None:
                live.session = make()
            return live.session

    def end_tools(self, live: Live, what: str = "a tool call") -> None:
        """No call may land after this: the session closes, waiting for calls in flight; one
        still running is the episode's infrastructure failing, not the agent."""
        if live.session is not None and not live.session.close():
            live.session.failure = live.session.failure or f"{what} was still running when the episode ended"

    def failure(self, live: Live, owned: Any) -> str | None:
        """Why the episode's infrastructure failed (its set died, a tool call found a service
        gone, its page crashed), or None. Kept in the evidence by families that grade from it,
        so a regrade reads the same failure."""
        return (owned.failed() or (live.session.failure if live.session is not None else None)
                or (live.episode.crashed if live.episode is not None else None))

    def release(self, task: Task, spec: Any) -> None:
        lease = spec.labels.get(self.lease_label)
        if not lease:
            return
        with self._lock:
            gone = [self._live.pop(k) for k in [k for k, v in self._live.items() if v.lease == lease]]
        for live in gone:
            if live.episode is not None:
                live.episode.close()
        self.pool.give_back(lease)

    def close(self) -> None:
        """The run is over: its sets stop; a later run of this family gets a new pool."""
        pool, self.pool = self.pool, self.new_pool()
        pool.close()

    def interrupt(self) -> None:
        self.pool.close()  # episodes still starting are refused a set (infra_error: interrupted)
