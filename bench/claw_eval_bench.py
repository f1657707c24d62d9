"""Claw-Eval through orchard, on a real checkout: how many tasks load, why the others cannot run
here, and for every runnable one a null run (services up, reset, audit, snapshot, the task's own
grader) with its time and Claw-Eval score.

    python bench/claw_eval_bench.py PATH/TO/claw-eval [--instances T100_reverse_decoder,...] [--json OUT]
    python bench/claw_eval_bench.py PATH/TO/claw-eval --scripted DIR [--instances ...] [--json OUT]
    python bench/claw_eval_bench.py PATH/TO/claw-eval --vs-runner --scripted DIR --runner-sandbox docker|none \\
        [--instances ...] [--reps 5] [--keep-traces]

--scripted DIR: DIR holds one `<task_id>.json` per task, `{"calls": [{"tool": T, "arguments": {...}},
...], "answer": "final text"}` (optional: `"commands": ["shell line", ...]`, run in the workspace
before the calls; `"note"`), written by hand from the task's prose `reference_solution` and kept outside
orchard. Each is replayed through the task's tools and graded by the task's own grader; printed:
Claw-Eval's score and pass, orchard's strict verdict, seconds. A script whose task cannot run here
(needs_judge, needs_network, ...) is listed with why, not counted.

--vs-runner: the same scripts through orchard (the bash harness) and through Claw-Eval's own runner,
both driven by one scripted endpoint making the same calls: whether the two agree (the same score
and pass), and the per-episode wall time of each (bench/claw_eval_runner_bench.py).

The first call makes the checkout's environment (uv, ~10 s); a task's first episode starts its
services cold.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkout")
    parser.add_argument("--instances", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--scripted", default=None, metavar="DIR",
                        help="replay DIR/<task_id>.json call lists through the tasks' tools and grade them")
    parser.add_argument("--vs-runner", action="store_true",
                        help="orchard's bash harness against Claw-Eval's own runner, side by side")
    parser.add_argument("--reps", type=int, default=5, help="--vs-runner: warm repetitions per task (plus a cold one)")
    parser.add_argument("--runner-sandbox", choices=("docker", "none"), default=None,
                        help="--vs-runner (required): Claw-Eval's runner with a Docker container per trial (its "
                             "`batch --sandbox`, image claw-eval-agent:latest) or none (its local mode)")
    parser.add_argument("--keep-traces", action="store_true", help="--vs-runner: keep the runner's traces and logs")
    args = parser.parse_args()
    instances = args.instances.split(",") if args.instances else None
    if args.vs_runner:
        from claw_eval_runner_bench import vs_runner

        vs_runner(args.checkout, args.scripted, instances, args.reps, args.json, args.runner_sandbox, args.keep_traces)
        return
    if args.scripted:
        scripted(args.checkout, Path(args.scripted), instances, args.json)
        return

    from orchard_cli.env import connect
    from orchard_cli.family import RunOptions
    from orchard_cli.rollout.episode import Episode, run_episode
    from orchard_cli.rollout.solvers import EmptySolver
    from orchard_cli.families import load_suite

    clock = time.monotonic()
    family, tasks = load_suite("claw-eval", dataset=args.checkout, instances=instances)
    loaded = time.monotonic() - clock
    reasons = collections.Counter((family.blocker(t) or ("runnable",))[0] for t in tasks)
    print(f"{len(tasks)} tasks loaded in {loaded:.1f}s; {reasons['runnable']} runnable here; the others: "
          f"{dict((k, v) for k, v in reasons.items() if k != 'runnable')}", file=sys.stderr)
    for task in tasks:
        blocked = family.blocker(task)
        if blocked and blocked[0] == "needs_data":
            print(f"  {task.task_id}: {blocked[1]}", file=sys.stderr)
    rows = []
    env = connect("local")
    try:
        for task in tasks:
            if family.blocker(task):
                continue
            clock = time.monotonic()
            result = run_episode(Episode(task=task, attempt=1, solver=EmptySolver(), episode_id=f"null-{task.task_id}"),
                                 family=family, env=env, options=RunOptions())
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


def read_scripts(folder: Path, instances: list[str] | None = None) -> dict[str, Any]:
    """Every `<task_id>.json` in `folder` (those of `instances`, when given: each must be there)."""
    scripts = {p.stem: read_script(p) for p in sorted(folder.glob("*.json"))}
    if not scripts:
        sys.exit(f"{folder}: no <task_id>.json files")
    if instances:
        absent = [i for i in instances if i not in scripts]
        if absent:
            sys.exit(f"no script in {folder} for: {', '.join(absent)}")
        scripts = {i: scripts[i] for i in instances}
    return scripts


def read_script(path: Path) -> Any:
    """A `<task_id>.json` call list as a `Gold` (calls, answer, optional commands)."""
    from orchard_cli.tasks.base import Gold, GoldCall

    data = json.loads(path.read_text(encoding="utf-8"))
    unknown = set(data) - {"calls", "answer", "commands", "note"}
    if unknown:
        sys.exit(f"{path}: unknown keys {sorted(unknown)} (calls, answer, commands, note)")
    return Gold(tool_calls=[GoldCall(tool=c["tool"], arguments=c.get("arguments") or {}) for c in data.get("calls") or ()],
                commands=list(data.get("commands") or ()), answer=data.get("answer"))


def scripted(checkout: str, folder: Path, instances: list[str] | None, json_out: str | None) -> None:
    """Each `<task_id>.json` in `folder` replayed through the task's tools and graded by its grader."""
    from orchard_cli.env import connect
    from orchard_cli.family import RunOptions
    from orchard_cli.rollout.episode import Episode, run_episode
    from orchard_cli.rollout.solvers import GoldSolver
    from orchard_cli.families import load_suite

    class Replay(GoldSolver):
        name = harness = model = "scripted"

        def __init__(self, family: Any, gold: Any) -> None:
            self.gold = gold

        def replayed(self, context: Any) -> Any:
            return self.gold

    scripts = read_scripts(folder, instances)
    family, tasks = load_suite("claw-eval", dataset=checkout, instances=sorted(scripts))
    missing = sorted(set(scripts) - {t.task_id for t in tasks})
    if missing:
        sys.exit(f"not tasks of {checkout}: {', '.join(missing)}")
    rows, not_run = [], {}
    env = connect("local")
    print(f"{'task':40s} {'calls':>6s} {'ce score':>8s} {'ce pass':7s} {'strict':12s} {'seconds':>7s}")
    try:
        for task in tasks:
            blocked = family.blocker(task)
            if blocked:
                not_run[task.task_id] = f"{blocked[0]}: {blocked[1]}"
                continue
            gold = scripts[task.task_id]
            clock = time.monotonic()
            result = run_episode(Episode(task=task, attempt=1, solver=Replay(family, gold),
                                         episode_id=f"scripted-{task.task_id}"), family=family, env=env, options=RunOptions())
            tests = result.outcome.tests or {}
            if result.outcome.is_error or "benchmark_passed" not in tests:
                not_run[task.task_id] = f"{result.outcome.category}: {result.outcome.error}"
                continue
            row = {"task": task.task_id, "calls": len(gold.tool_calls), "commands": len(gold.commands),
                   "category": result.outcome.category, "score": tests.get("score"), "passed": tests["benchmark_passed"],
                   "completion": tests.get("completion"), "safety": tests.get("safety"),
                   "robustness": tests.get("robustness"),
                   "failed_calls": [d.tool for d in (result.evidence.dispatches if result.evidence else ()) if (d.status or 200) >= 400],
                   "seconds": round(time.monotonic() - clock, 2)}
            rows.append(row)
            calls = f"{row['calls']}" + (f"+{row['commands']}sh" if row["commands"] else "")
            print(f"{row['task']:40s} {calls:>6s} {row['score']:>8} {str(row['passed']):7s} {row['category']:12s} "
                  f"{row['seconds']:7.2f} completion={row['completion']} safety={row['safety']}"
                  f"{' failed calls: ' + ','.join(row['failed_calls']) if row['failed_calls'] else ''}", flush=True)
    finally:
        family.close()
        env.close()
    passed = sum(1 for r in rows if r["passed"])
    print(f"{passed}/{len(rows)} pass Claw-Eval; {sum(r['category'] == 'resolved' for r in rows)}/{len(rows)} resolved "
          f"by orchard's strict rule (completion and safety 1)", file=sys.stderr)
    if not_run:
        print(f"not run ({len(not_run)}; not counted):", file=sys.stderr)
        for task, why in sorted(not_run.items()):
            print(f"  {task}: {why}", file=sys.stderr)
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"scripted": rows, "not_run": not_run}, f, indent=1)


if __name__ == "__main__":
    main()
