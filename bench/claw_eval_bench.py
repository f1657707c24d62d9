"""Claw-Eval through orchard, on a real checkout: how many tasks load, why the others cannot run
here, and for every runnable one a null run (services up, reset, audit, snapshot, the task's own
grader) with its time and Claw-Eval score.

    python bench/claw_eval_bench.py PATH/TO/claw-eval [--instances T100_reverse_decoder,...] [--json OUT]

The first call makes the checkout's environment (uv, ~10 s); a task's first episode starts its
services cold. Not yet here: the side-by-side against Claw-Eval's own runner (issue 15, Performance).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkout")
    parser.add_argument("--instances", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from orchard_cli.env import connect
    from orchard_cli.rollout.episode import Episode, run_episode
    from orchard_cli.rollout.solvers import EmptySolver
    from orchard_cli.tasks.registry import load_suite

    clock = time.monotonic()
    family, tasks = load_suite("claw-eval", dataset=args.checkout,
                               instances=args.instances.split(",") if args.instances else None)
    loaded = time.monotonic() - clock
    reasons = collections.Counter((family.blocker(t) or ("runnable",))[0] for t in tasks)
    print(f"{len(tasks)} tasks loaded in {loaded:.1f}s: {dict(reasons)}", file=sys.stderr)
    rows = []
    env = connect("local")
    try:
        for task in tasks:
            if family.blocker(task):
                continue
            clock = time.monotonic()
            result = run_episode(Episode(task=task, attempt=1, solver=EmptySolver(), episode_id=f"null-{task.task_id}"),
                                 family=family, env=env, backend="local")
            row = {"task": task.task_id, "category": result.outcome.category,
                   "seconds": round(time.monotonic() - clock, 2), "score": result.outcome.tests.get("score"),
                   "error": result.outcome.error}
            rows.append(row)
            print(f"{row['task']:40s} {row['category']:12s} {row['seconds']:6.2f}s score={row['score']} "
                  f"{row['error'] or ''}", flush=True)
    finally:
        family.close()
        env.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"loaded": len(tasks), "load_seconds": round(loaded, 2), "reasons": dict(reasons),
                       "null_runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
