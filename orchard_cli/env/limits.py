"""The process limit that bounds how many sandboxes one process holds: open files.

What one sandbox costs the process that holds it (measured by bench/env_bench.py --many, and
pinned by tests/env/test_scale.py):

  local   2 file descriptors (the runner's socket, bwrap's diagnostics pipe), no thread (one
          reader thread serves every sandbox: io_loop.py), 3 processes (bwrap, its pid 1, the
          runner), one cgroup per controller (memory, pids, cpu) when cgroups are writable
  docker  1 file descriptor (the runner's socket), no thread, one container

The soft open-files limit binds first (1,024 on many systems: ~380 sandboxes); the service and
every EnvManager raise it to the hard limit at start (`raise_open_files`), and say so when the
hard limit itself leaves room for fewer than CAPACITY_GOAL sandboxes. Commands in local
sandboxes get the limit the process started with (the runner lowers it again).
"""

from __future__ import annotations

from dataclasses import dataclass

FDS_PER_SANDBOX = 2
RESERVED_FDS = 256
"""Kept for everything else: the HTTP server's connections, log files, images, the model."""
CAPACITY_GOAL = 1000


@dataclass(frozen=True)
class OpenFiles:
    before: int
    soft: int
    hard: int

    @property
    def sandboxes(self) -> int:
        """About how many sandboxes fit under the soft limit."""
        return max(0, (self.soft - RESERVED_FDS) // FDS_PER_SANDBOX)

    def describe(self) -> str | None:
        """One line for the service's log: what changed, or what caps the count; None when
        nothing is worth saying."""
        raised = f"open files: soft limit raised from {self.before} to {self.soft}" if self.soft > self.before else ""
        if self.sandboxes < CAPACITY_GOAL:
            capped = (f"open files: the limit ({self.soft}, hard {self.hard}) leaves room for about "
                      f"{self.sandboxes} sandboxes; raise the hard limit (ulimit -Hn, LimitNOFILE=) for more")
            return f"{raised}; {capped}" if raised else capped
        return raised or None


_started_with: int | None = None


def started_with() -> int | None:
    """The soft open-files limit this process had before `raise_open_files` (None before it ran):
    what sandboxed commands get back, so the raise does not change their `ulimit -n`."""
    return _started_with


def raise_open_files() -> OpenFiles:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (idempotent)."""
    import resource

    global _started_with
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _started_with is None:
        _started_with = soft if soft != resource.RLIM_INFINITY else None
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return OpenFiles(soft, soft, hard)
        return OpenFiles(soft, target, hard)
    return OpenFiles(soft, soft, hard)
