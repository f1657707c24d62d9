"""What a person sees while a long run works (eval, distill, rollout, rl, tasks validate, judge).

On a terminal: the overall bar (done/total, resolved, errors, elapsed, an ETA from the episodes
finished so far) with one live line per running episode under it (task, attempt, phase, model
calls, tokens, elapsed), redrawn twice a second; errors print above it as they happen.

Not on a terminal (CI, `| tee`, a log file): one plain line per finished episode, and a heartbeat
line naming what runs when nothing was said for `ORCHARD_PROGRESS_SECONDS` (default 15) seconds,
so a log never goes quiet for minutes. Lines are written whole (never wrapped mid-word).

`--quiet` shows none of it. Results (stdout, `--format json`) are not touched: all of this is stderr.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

HEARTBEAT_ENV = "ORCHARD_PROGRESS_SECONDS"
DEFAULT_HEARTBEAT_SECONDS = 15.0
ERROR_WORDS = ("env_error", "infra_error", "error")
"""Counted as errors, as the scorecard counts them (a timeout is an outcome: said, not counted)."""
LOUD_WORDS = (*ERROR_WORDS, "timeout")
"""Said above the bar as they happen."""


def clock(seconds: float | None) -> str:
    """1:05:09, 4:10, 0:07."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "-:--"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def tokens(count: int) -> str:
    return f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count / 1e3:.1f}k" if count >= 1e4 else f"{count:,}"


def heartbeat_seconds() -> float:
    try:
        value = float(os.environ.get(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_SECONDS))
    except ValueError:
        value = DEFAULT_HEARTBEAT_SECONDS
    return max(0.2, value)


def busy(workers: int, episodes: int) -> str:
    """The workers a run will keep busy: '2 worker(s)' for 2 episodes under --workers 3."""
    used = max(1, min(workers, episodes))
    return f"{used} worker(s)" + (f" (of --workers {workers}: {episodes} episode(s))" if used < workers else "")


def running_text(row: dict[str, Any], *, who: bool = False) -> str:
    """One running episode: 'mail-reply #1 agent, call 4, 3,210 tok, 0:42'."""
    parts = [row["phase"] + (f" turn {row['turn']}" if row.get("turn") else "")]
    if row["calls"]:
        parts.append(f"call {row['calls']}")
    if row["tokens"]:
        parts.append(f"{tokens(row['tokens'])} tok")
    parts.append(clock(row["seconds"]))
    name = f"{row['task']} #{row['attempt']}" + (f" ({row['who']})" if who and row.get("who") else "")
    return f"{name} {', '.join(parts)}"


class RunProgress:
    """The progress of one run; `done()` once per finished episode (or step), from any thread."""

    def __init__(self, label: str, total: int | None, *, console: Any, quiet: bool = False,
                 unit: str = "episode", good: str = "resolved") -> None:
        from orchard_cli.rollout.live import LiveBoard

        self.label, self.total, self.console, self.quiet, self.unit = label, total, console, quiet, unit
        self.good = good
        """What a good unit is called in the counts ('resolved'; 'valid' for tasks validate)."""
        self.board = LiveBoard()
        self.finished = self.resolved = self.errors = 0
        self.started = time.monotonic()
        self.terminal = bool(getattr(console, "is_terminal", False)) and not quiet
        self._lock = threading.Lock()
        self._live: Any = None
        self._watch: Any = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._last_line = time.monotonic()

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "RunProgress":
        from orchard_cli.rollout.live import watching

        self._watch = watching(self.board)
        self._watch.__enter__()
        self.started = self._last_line = time.monotonic()
        if self.quiet:
            return self
        if self.terminal:
            from rich.live import Live

            self._live = Live(get_renderable=self._renderable, console=self.console, refresh_per_second=2,
                              transient=False, redirect_stdout=False, redirect_stderr=False)
            self._live.__enter__()
        else:
            self._beat = threading.Thread(target=self._heartbeats, name="orchard-progress", daemon=True)
            self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None
        if self._beat is not None:
            self._beat.join(timeout=2)
            if self.finished:  # the log's last progress line: the counts, as the bar ended
                counts = f"{self.resolved} {self.good}, {self.errors} error{'s' * (self.errors != 1)}"
                self.say(f"{self._count()} {counts} in {clock(time.monotonic() - self.started)}")
        self._watch.__exit__(None, None, None)

    # -- what the command reports ---------------------------------------------------------------
    def done(self, task: str, attempt: int | None, category: str, *, resolved: bool | None = None,
             seconds: float | None = None, calls: int | None = None, tokens_used: int | None = None,
             detail: str | None = None, error: str | None = None, count: int = 1) -> None:
        """An episode (or `count` of them, or a step) finished."""
        is_error, loud = category in ERROR_WORDS, category in LOUD_WORDS
        with self._lock:
            self.finished += count
            self.resolved += int(bool(resolved if resolved is not None else category == "resolved"))
            self.errors += int(is_error)
        if self.quiet:
            return
        name = task + (f" #{attempt}" if attempt is not None else "")
        if self.terminal:
            if loud:
                self.say(f"{category} {name}: {error or ''}".rstrip(": "), style="red")
            return
        facts = [x for x in ((clock(seconds) if seconds is not None else None),
                             (f"{calls} call{'s' * (calls != 1)}" if calls else None),
                             (f"{tokens(tokens_used)} tok" if tokens_used else None), detail) if x]
        line = f"{self._count()} {category} {name}" + (f" ({', '.join(facts)})" if facts else "")
        self.say(line + (f": {error}" if loud and error else ""))

    def tick(self, *, resolved: bool | int = False, error: bool = False, count: int = 1) -> None:
        """Count finished units whose line the command prints itself (`say`); `resolved`: how many
        of them were good (a bool for one)."""
        with self._lock:
            self.finished += count
            self.resolved += int(resolved)
            self.errors += int(error)

    def say(self, text: str, style: str | None = None) -> None:
        """A whole line on stderr (above the live display on a terminal)."""
        if self.quiet:
            return
        self._last_line = time.monotonic()
        if self._live is not None:
            from rich.text import Text

            self._live.console.print(Text(text, style=style or ""), soft_wrap=True, highlight=False)
            return
        stream = getattr(self.console, "file", None) or sys.stderr
        stream.write(text + "\n")
        stream.flush()

    # -- rendering ------------------------------------------------------------------------------
    def eta(self) -> float | None:
        if not self.total or not self.finished:
            return None
        elapsed = time.monotonic() - self.started
        return max(0.0, elapsed / self.finished * (self.total - self.finished))

    def _count(self) -> str:
        of = f"/{self.total}" if self.total is not None else ""
        return f"{self.label} [{self.finished}{of}]"

    def _summary(self) -> str:
        elapsed = time.monotonic() - self.started
        eta = self.eta()
        when = f"{clock(elapsed)} elapsed" + (f", eta {clock(eta)}" if eta is not None else
                                               ", eta after the first finishes" if self.total else "")
        counts = f"{self.resolved} {self.good}, {self.errors} error{'s' * (self.errors != 1)}, " if self.total is not None or self.finished else ""
        return counts + when

    def _heartbeats(self) -> None:
        every = heartbeat_seconds()
        while not self._stop.wait(min(every, 1.0)):
            if time.monotonic() - self._last_line < every:
                continue
            running = self.board.snapshot()
            who = len({r.get("who") for r in running}) > 1
            shown = "; ".join(running_text(r, who=who) for r in running[:8])
            more = f"; and {len(running) - 8} more" if len(running) > 8 else ""
            self.say(f"{self._count()} {self._summary()}" + (f"; running: {shown}{more}" if shown else "; working"))

    def _renderable(self) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        head = Table.grid(padding=(0, 1))
        head.add_row(Text(self.label, style="bold"),
                     ProgressBar(total=self.total or None, completed=self.finished, width=30),
                     Text(f"{self.finished}/{self.total}" if self.total is not None else str(self.finished)),
                     Text(f"{self.resolved} {self.good}", style="green"),
                     Text(f"{self.errors} error{'s' * (self.errors != 1)}", style="red" if self.errors else "dim"),
                     Text(clock(time.monotonic() - self.started)),
                     Text(f"eta {clock(self.eta())}" if self.total else ""))
        running = self.board.snapshot()
        who = len({r.get("who") for r in running}) > 1
        lines = [Text("  " + running_text(r, who=who), style="dim", no_wrap=True, overflow="ellipsis")
                 for r in running[:12]]
        if len(running) > 12:
            lines.append(Text(f"  and {len(running) - 12} more running", style="dim"))
        return Group(head, *lines)


__all__ = ["RunProgress", "clock", "running_text"]
