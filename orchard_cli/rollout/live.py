"""What each running episode is doing right now, for a person watching a long run.

The pool registers every episode it starts on the run's `LiveBoard` (when a command is watching:
`with watching(board): plan.execute(...)`) and takes it off when its result is reported; the
episode sets its phase as it goes (sandbox, setup, agent, grading) and an agent attaches a probe
that reads its proxy episode's counters (model calls, tokens) without waiting on calls in flight.
A renderer (`commands/_progress.py`) reads `snapshot()` once a second or so. Nothing here prints,
and nothing slows an episode: updates are attribute writes, the snapshot takes one lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Activity:
    """One running episode as a person sees it."""

    task: str
    attempt: int = 1
    who: str = ""
    """The model (or solver) when a run has several (distill's teachers); '' otherwise."""
    phase: str = "queued"
    started: float = field(default_factory=time.monotonic)
    turn: int = 0
    """A multi-turn episode's user turn (0: a single run of the harness)."""
    probe: Callable[[], tuple[int, int, int]] | None = None
    """(model calls, tokens in, tokens out) so far; set by an agent once its proxy episode is open."""

    def set_phase(self, phase: str) -> None:
        self.phase = phase

    def counters(self) -> tuple[int, int, int]:
        probe = self.probe
        if probe is None:
            return 0, 0, 0
        try:
            return probe()
        except Exception:  # a probe is a courtesy; never break the display
            return 0, 0, 0

    def view(self, now: float | None = None) -> dict[str, Any]:
        calls, tokens_in, tokens_out = self.counters()
        return {"task": self.task, "attempt": self.attempt, "who": self.who, "phase": self.phase,
                "turn": self.turn, "calls": calls, "tokens": tokens_in + tokens_out,
                "seconds": round((now or time.monotonic()) - self.started, 1)}


class LiveBoard:
    """The running episodes of one run (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, Activity] = {}

    def start(self, key: str, task: str, attempt: int = 1, who: str = "") -> Activity:
        activity = Activity(task=task, attempt=attempt, who=who, phase="starting")
        with self._lock:
            self._running[key] = activity
        return activity

    def finish(self, key: str) -> None:
        with self._lock:
            self._running.pop(key, None)

    def snapshot(self) -> list[dict[str, Any]]:
        """The running episodes, oldest first."""
        now = time.monotonic()
        with self._lock:
            running = sorted(self._running.values(), key=lambda a: a.started)
        return [a.view(now) for a in running]


_board: ContextVar[LiveBoard | None] = ContextVar("orchard_live_board", default=None)


@contextmanager
def watching(board: LiveBoard | None) -> Iterator[LiveBoard | None]:
    """Pools made inside this block (in this thread) report their episodes on `board`."""
    token = _board.set(board)
    try:
        yield board
    finally:
        _board.reset(token)


def current_board() -> LiveBoard | None:
    return _board.get()


__all__ = ["Activity", "LiveBoard", "current_board", "watching"]
