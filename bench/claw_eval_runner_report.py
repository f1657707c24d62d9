"""The side-by-side table of bench/claw_eval_runner_bench.py: agreement, per-episode times, the
speed goal, each side's split."""

from __future__ import annotations

import statistics
from typing import Any

DOCKER_ALLOWANCE_S = 0.7
"""What the runner's Docker mode adds per trial (its container up and down): the speed goal is
orchard's episode at most the runner's without a sandbox plus this."""

ORCHARD_SPLIT = ("services", "reset+files", "reset", "agent", "collect", "audit", "grade", "other")
"""reset is inside reset+files, audit inside collect; other = wall less the top-level phases."""
ORCHARD_TOP = ("services", "reset+files", "agent", "collect", "grade", "release")
RUNNER_SPLIT = ("reset", "container up", "files", "agent", "audit", "snapshot", "container down", "grade", "other")
RUNNER_TOP = RUNNER_SPLIT[:-1]


def report(rows: list[dict[str, Any]], reps: int, runner_sandbox: str, skipped: dict[str, str],
           definitions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    for row in rows:
        top = ORCHARD_TOP if row["side"] == "orchard" else RUNNER_TOP
        row["phases"]["other"] = row["seconds"] - sum(row["phases"].get(k, 0.0) for k in top)

    def med(task: str, side: str, key: str | None = None, warm: bool = True) -> float:
        found = [r for r in rows if r["task"] == task and r["side"] == side and (r["rep"] > 0) == warm]
        values = [r["seconds"] if key is None else r["phases"].get(key, 0.0) for r in found]
        return statistics.median(values) if values else float("nan")

    def verdicts(task: str, side: str) -> set[tuple[Any, Any]]:
        return {(r.get("score"), r.get("passed")) for r in rows if r["task"] == task and r["side"] == side}

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    print(f"\nper-episode wall, median of {reps} warm reps (s); cold = rep 0 (runner cold: services up + trial 0); "
          f"agree = the same Claw-Eval score and pass on every rep")
    print(f"{'task':40s} {'calls':>6s} {'orchard':>8s} {'runner':>8s} {'ratio':>6s} {'o cold':>7s} {'r cold':>7s} "
          f"{'o score/pass':>13s} {'r score/pass':>13s} {'agree':>5s} {'strict':>10s}")
    agree_count, per_task = 0, {}
    for task in tasks:
        o, r = med(task, "orchard"), med(task, "runner")
        oc = med(task, "orchard", warm=False)
        rc = med(task, "runner", warm=False) + med(task, "runner", "services up", warm=False)
        ov, rv = verdicts(task, "orchard"), verdicts(task, "runner")
        agree = len(ov) == 1 and ov == rv
        agree_count += agree
        first = next(x for x in rows if x["task"] == task and x["side"] == "orchard")
        calls = f"{first['calls']}" + (f"+{first['commands']}sh" if first["commands"] else "")
        mark = ""
        if runner_sandbox == "none" and not agree and _reads_snapshot(definitions.get(task) or {}):
            mark = "  (its grader reads the env snapshot, which the runner's local mode does not take)"
        print(f"{task:40s} {calls:>6s} {o:8.2f} {r:8.2f} {o / r:6.2f} {oc:7.2f} {rc:7.2f} {_v(ov):>13s} {_v(rv):>13s} "
              f"{'yes' if agree else 'NO':>5s} {first['category']:>10s}{mark}")
        per_task[task] = {"orchard": o, "runner": r, "agree": agree, "strict": first["category"]}
    summary: dict[str, Any] = {"tasks": len(tasks), "agree": agree_count, "not_run": len(skipped)}
    if tasks:
        mo = statistics.median(v["orchard"] for v in per_task.values())
        mr = statistics.median(v["runner"] for v in per_task.values())
        summary.update(orchard_median=mo, runner_median=mr, per_task=per_task)
        print(f"{'median over tasks':40s} {'':>6s} {mo:8.2f} {mr:8.2f} {mo / mr:6.2f}")
        print(f"\nagree: {agree_count}/{len(tasks)} tasks that ran on both sides")
        if runner_sandbox == "none":
            goal = mr + DOCKER_ALLOWANCE_S
            met = sum(v["orchard"] <= v["runner"] + DOCKER_ALLOWANCE_S for v in per_task.values())
            summary.update(goal_s=goal, goal_met=mo <= goal, tasks_within_goal=met)
            print(f"speed goal (orchard <= the runner without a sandbox + {DOCKER_ALLOWANCE_S} s, its Docker mode's cost "
                  f"per trial): median {mo:.2f} s vs {goal:.2f} s: {'met' if mo <= goal else 'NOT met'}; "
                  f"{met}/{len(tasks)} tasks within it")
    if skipped:
        print(f"\nnot run ({len(skipped)}; not counted):")
        for task, why in sorted(skipped.items()):
            print(f"  {task}: {why}")
    for side, split in (("orchard", ORCHARD_SPLIT), ("runner", RUNNER_SPLIT)):
        print(f"\n{side} split, warm medians (ms)")
        print(f"{'task':40s} " + " ".join(f"{k[:12]:>12s}" for k in split))
        for task in tasks:
            print(f"{task:40s} " + " ".join(f"{1000 * med(task, side, k):12.0f}" for k in split))
    print("\norchard: services = sandbox_spec (the lease: the task's services started when cold); reset+files = "
          "setup (the set's reset, the workspace files); agent = the bash harness run (model calls through "
          "orchard's recording proxy, each task-tool call answered by the agent's helper through the tool "
          "gateway); collect = tools closed, /audit, snapshot, messages rebuilt; grade = the task's grader in a "
          "helper process in the checkout's env; other = sandbox create/destroy, baseline, logs.")
    print(f"runner ({runner_sandbox}): reset = reset_all; agent = run_task less its /audit GETs; snapshot = grader "
          "files, env snapshot, saving it; grade = load_trace + get_grader + grade (in process); other = trace "
          "bookkeeping, local grader files.")
    return summary


def _v(found: set[tuple[Any, Any]]) -> str:
    if len(found) != 1:
        return "varies"
    score, passed = next(iter(found))
    return f"{score}/{'pass' if passed else 'fail'}"


def _reads_snapshot(definition: dict[str, Any]) -> bool:
    return bool(definition.get("env_snapshot_files") or definition.get("env_snapshot_commands")
                or definition.get("sandbox_grader_files"))
