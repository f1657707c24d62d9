"""Claw episodes benchmark: what orchard adds to an attempt, and 1 worker against 2.

One run on claw-mini with the gold solver (the agent's own time is ~0, so an episode's time is
orchard's): every phase of every episode is timed, medians and p90 printed side by side:

  lease          a service set from the pool (cold: the first per worker, started; warm: reused)
  sandbox        create the task's sandbox (local backend, bubblewrap)
  reset+setup    the services reset to the task's fixture, the workspace written
  solve          the gold tool calls through the ToolSession (real SMTP/IMAP-store/CalDAV-store work)
  collect        snapshot of the services, workspace files, dispatches
  grade          the checks (command checks run in the sandbox)
  destroy        sandbox destroyed, the set given back
  episode        the whole attempt, as the rollout core measures it

Then the same suite with --workers 1 and --workers 2 (goal: ~2x on 2 cores), and the floor of
a service set: bench/claw_services_bench.py (cold start and reset against the bare servers).

Usage: .venv/bin/python bench/claw_bench.py [--limit 44] [--attempts 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict

os.environ.setdefault("ORCHARD_HOME", tempfile.mkdtemp(prefix="orchard-bench-"))

from orchard_cli.env import connect  # noqa: E402
from orchard_cli.family import RunOptions  # noqa: E402
from orchard_cli.rollout.episode import Episode  # noqa: E402
from orchard_cli.rollout.pool import Pool  # noqa: E402
from orchard_cli.rollout.solvers import GoldSolver  # noqa: E402
from orchard_cli.tasks.claw.family import ClawEpisode, ClawFamily  # noqa: E402
from orchard_cli.families import load_suite  # noqa: E402


class TimedFamily(ClawFamily):
    """ClawFamily whose episodes time each phase (seconds, by phase)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: dict[str, list[float]] = defaultdict(list)

    def _timed(self, phase, fn, *args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.times[phase].append(time.perf_counter() - started)

    def episode(self, task, options):
        return TimedEpisode(self, task, options)


class TimedEpisode(ClawEpisode):
    def spec(self, backend):
        pool = self.family.pool
        before = pool.started
        started = time.perf_counter()
        spec = super().spec(backend)
        self.family.times["lease (cold)" if pool.started > before else "lease (warm)"].append(
            time.perf_counter() - started)
        return spec

    def setup(self, sandbox, *, for_grading=False):
        return self.family._timed("reset+setup", super().setup, sandbox, for_grading=for_grading)

    def collect(self, solution, sandbox):
        return self.family._timed("collect", super().collect, solution, sandbox)

    def grade(self, evidence, sandbox):
        return self.family._timed("grade", super().grade, evidence, sandbox)

    def __exit__(self, *exc):
        return self.family._timed("give back", super().__exit__, *exc)


class TimedGold(GoldSolver):
    def solve(self, context):
        return self.family._timed("solve (gold calls)", super().solve, context)


def run(family, tasks, attempts: int, workers: int) -> tuple[float, list]:
    family.run_pool = family.pool  # the run's end swaps in a new pool: keep its counts
    env = connect("local")
    solver = TimedGold(family)
    episodes = [Episode(task=t, attempt=k, solver=solver, episode_id=f"bench-{t.task_id}-{k}")
                for t in tasks for k in range(1, attempts + 1)]
    results = []
    started = time.perf_counter()
    try:
        Pool(env, family, options=RunOptions(), workers=workers).run(episodes, results.append)
    finally:
        env.close()
    wall = time.perf_counter() - started
    bad = [r for r in results if r.outcome.category != "resolved"]
    if bad:
        sys.exit(f"gold did not resolve {bad[0].task.task_id}: {bad[0].outcome}")
    return wall, results


def stats(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return f"{1000 * statistics.median(values):9.1f} {1000 * p90:9.1f} {len(values):6d}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=44)
    parser.add_argument("--attempts", type=int, default=2)
    args = parser.parse_args()
    print(f"# .venv/bin/python bench/claw_bench.py --limit {args.limit} --attempts {args.attempts}")
    print(f"# {os.cpu_count()} cores; gold solver, local backend, claw-mini")
    family = TimedFamily()
    _, tasks = load_suite("claw-mini", limit=args.limit)
    wall1, results = run(family, tasks, args.attempts, 1)
    family.times["episode"] = [r.duration_seconds for r in results]
    print(f"\n{'phase':<22} {'median ms':>9} {'p90 ms':>9} {'n':>6}")
    for phase in ("lease (cold)", "lease (warm)", "reset+setup", "solve (gold calls)", "collect", "grade",
                  "give back", "episode"):
        if family.times.get(phase):
            print(f"{phase:<22} {stats(family.times[phase])}")
    known = sum(statistics.median(family.times[p]) for p in ("lease (warm)", "reset+setup", "collect", "grade",
                                                           "give back") if family.times.get(p))
    episode = statistics.median(family.times["episode"])
    print(f"{'sandbox + other':<22} {1000 * (episode - known - statistics.median(family.times['solve (gold calls)'])):9.1f}"
          "   (episode minus the phases above: sandbox create/destroy, baseline)")
    print(f"\norchard's time per attempt beyond the agent's (median episode minus solve): "
          f"{1000 * (episode - statistics.median(family.times['solve (gold calls)'])):.0f} ms (goal < 1000 ms)")
    family2 = TimedFamily()
    wall2, _ = run(family2, tasks, args.attempts, 2)
    n = len(tasks) * args.attempts
    print(f"\n{'workers':<10} {'wall s':>8} {'attempts/s':>11} {'sets started':>13}")
    print(f"{1:<10} {wall1:8.1f} {n / wall1:11.2f} {family.run_pool.started:13d}")
    print(f"{2:<10} {wall2:8.1f} {n / wall2:11.2f} {family2.run_pool.started:13d}")
    print(f"speed-up 2 vs 1 worker: x{wall1 / wall2:.2f} (goal ~2x on 2 cores)")


if __name__ == "__main__":
    main()
