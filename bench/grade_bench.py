"""SWE grading benchmark: orchard's grading overhead, environment reuse, and --workers scaling.

Everything runs in one go on the bundled `swe-mini` suite (real PyPI packages), local backend,
gold patches, from an empty ORCHARD_HOME, and is printed as one table (medians, ratios):

  cold vs warm   `orchard eval swe-mini --instances A` on the empty home (sdist fetched,
                 environment built), then `--instances B` of the same repo/version: wall time, and
                 proof of no reinstall (env.json's built_at, build.log and the environment's
                 site-packages unchanged)
  overhead       per instance, R rounds of: a whole attempt through the API (create, setup,
                 SWEFamily.grade with the gold patch: apply, run, parse), then, in that same
                 prepared tree, the floor and the sandbox's exec of the same eval script (reset
                 test files, apply test_patch, the test command), then destroy. The floor is that
                 script run by a bare `bwrap` with the sandbox's own argv (same root, mounts,
                 /testbed and /tmp; no runner, no cgroups, no orchard code), and its log must grade
                 like orchard's. Also `orchard eval` per instance (results.jsonl duration).
                 Goal: orchard <= 1.10 x floor + 1 s.
  workers        `orchard eval` over the same N warm instances with --workers 1 and 2 (wall)

Usage: .venv/bin/python bench/grade_bench.py [--repo pypi/inflection] [--n 4] [--reps 3]
         [--instances ID,...] [--keep-home]
Needs bubblewrap and PyPI (the sdist and the environment are fetched on the cold run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOME = Path(tempfile.mkdtemp(prefix="orchard-grade-bench-"))
os.environ["ORCHARD_HOME"] = str(HOME)
SUITE = Path(__file__).resolve().parent.parent / "tasks" / "data" / "swe-mini.jsonl"
GOAL_RATIO, GOAL_FIXED = 1.10, 1.0
FLOOR_LOG = "/tmp/orchard-floor.log"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def eval_cli(ids: list[str], workers: int, out: Path) -> tuple[float, list[dict]]:
    """`orchard eval swe-mini --predictions gold` as a user runs it; (wall, results rows)."""
    argv = [sys.executable, "-m", "orchard_cli.main", "eval", "swe-mini", "--predictions", "gold",
            "--instances", ",".join(ids), "--workers", str(workers), "--out", str(out), "--format", "json"]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()] \
        if (out / "results.jsonl").is_file() else []
    bad = [r["instance_id"] for r in rows if not r["resolved"]]
    if done.returncode != 0 or bad or len(rows) != len(ids):
        say(f"  ! eval exit {done.returncode}, unresolved {bad}: {done.stderr.strip()[-400:]}")
    return wall, rows


def env_snapshot() -> dict[str, tuple]:
    """Per built environment: (built_at, build_seconds, build.log mtime, site-packages digest)."""
    from orchard_cli.tasks.swe.environment import envs_root

    out = {}
    for folder in sorted(p for p in envs_root().iterdir() if (p / "env.json").is_file()):
        marker = json.loads((folder / "env.json").read_text())
        site = hashlib.sha256()
        for path in sorted((folder / "testbed" / "lib").glob("python*/site-packages/*")):
            site.update(f"{path.name}:{path.stat().st_mtime_ns}\n".encode())
        out[folder.name] = (marker["built_at"], marker["build_seconds"],
                            (folder / "build.log").stat().st_mtime_ns, site.hexdigest()[:12])
    return out


def cold_warm(first: str, second: str) -> list[tuple[str, str]]:
    say(f"cold: {first} on an empty ORCHARD_HOME")
    cold_wall, cold_rows = eval_cli([first], 1, HOME / "cold")
    before = env_snapshot()
    say(f"warm: {second} (same repo/version)")
    warm_wall, warm_rows = eval_cli([second], 1, HOME / "warm")
    after = env_snapshot()
    build = next(iter(before.values()))[1] if before else float("nan")
    dur = lambda rows: rows[0]["duration_seconds"] if rows else float("nan")  # noqa: E731
    same = bool(before) and before == after
    return [
        ("cold: eval CLI wall, empty home (1 instance)", f"{cold_wall:6.1f} s  (attempt {dur(cold_rows):.1f} s, "
                                                         f"environment build {build:.1f} s)"),
        ("warm: eval CLI wall, same repo/version", f"{warm_wall:6.1f} s  (attempt {dur(warm_rows):.1f} s)  "
                                                   f"cold/warm x{cold_wall / warm_wall:.1f}"),
        ("warm: reinstall?", "none: env.json built_at, build.log and site-packages unchanged" if same
         else f"CHANGED: {before} -> {after}"),
    ]


def overhead(ids: list[str], reps: int) -> tuple[dict[str, list[float]], float]:
    """Per instance, `reps` rounds of: a whole attempt through the API (create, setup, grade with
    the gold patch), then in that same prepared tree the floor and the sandbox's exec of the same
    eval script, then destroy. Returns per-instance medians and the one-time parser import."""
    from orchard_cli.env import SandboxHandle, connect
    from orchard_cli.env.local_bwrap import bwrap_argv, image_root
    from orchard_cli.evidence import Evidence
    from orchard_cli.home import orchard_home, state_dir
    from orchard_cli.tasks.registry import load_suite
    from orchard_cli.tasks.swe import official
    from orchard_cli.tasks.swe.grading import EVAL_LOG, EVAL_SCRIPT, verdict

    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SystemExit("needs bubblewrap (apt-get install bubblewrap)")
    family, tasks = load_suite("swe-mini", instances=ids)
    parser_name = tasks[0].record.get("log_parser") or family.recipe(tasks[0]).log_parser
    s = time.perf_counter()
    official.log_parser(parser_name, tasks[0].repo)  # once per process: swebench's parsers
    parser_import = time.perf_counter() - s
    env = connect("local")
    m: dict[str, list[float]] = {}
    try:
        for i, task in enumerate(tasks, 1):
            family.repository(task)  # the instance's repository rebuilt outside the timings
            one: dict[str, list[float]] = {}
            for _ in range(reps):
                t0 = time.perf_counter()
                spec = family.task_spec(task, "local")
                sandbox = SandboxHandle.create(env, spec)
                t1 = time.perf_counter()
                family.prepare(task, sandbox)
                t2 = time.perf_counter()
                outcome = family.run_tests(task, Evidence(patch=family.gold_patch(task)), sandbox)
                t3 = time.perf_counter()
                if not outcome.resolved:
                    say(f"  ! {task.task_id}: {outcome.category} {outcome.error}")
                folder = Path(sandbox.info.details["folder"])
                argv = [*bwrap_argv(bwrap, image_root(spec.image), folder, spec,
                                    [state_dir("env", "local"), orchard_home()]),
                        "--", "/bin/bash", "-c", f"bash {EVAL_SCRIPT} > {FLOOR_LOG} 2>&1"]
                s = time.perf_counter()
                subprocess.run(argv, env={"LANG": "C.UTF-8", **spec.env}, check=False)
                floor = time.perf_counter() - s
                s = time.perf_counter()
                sandbox.exec(f"bash {EVAL_SCRIPT} > {EVAL_LOG} 2>&1", timeout=1800)
                execd = time.perf_counter() - s
                floor_log = (folder / "tmp" / FLOOR_LOG.removeprefix("/tmp/")).read_text(errors="replace")
                ok, report = verdict(task.record, floor_log, parser_name)
                if ok != outcome.resolved or report["parsed_tests"] != outcome.tests.get("parsed_tests"):
                    say(f"  ! {task.task_id}: the floor's log does not grade like orchard's "
                        f"({report['parsed_tests']} vs {outcome.tests.get('parsed_tests')} tests)")
                t4 = time.perf_counter()
                sandbox.destroy()
                t5 = time.perf_counter()
                attempt = (t3 - t0) + (t5 - t4)
                for key, value in (("floor", floor), ("exec", execd), ("grade", t3 - t2),
                                   ("grade_tests", outcome.tests.get("seconds", float("nan"))),
                                   ("attempt", attempt), ("create", t1 - t0), ("setup", t2 - t1),
                                   ("destroy", t5 - t4), ("exec_ratio", execd / floor),
                                   ("grade_ratio", (t3 - t2) / floor), ("attempt_ratio", attempt / floor)):
                    one.setdefault(key, []).append(value)
            for key, values in one.items():
                m.setdefault(key, []).append(med(values))
            say(f"  [{i}/{len(tasks)}] {task.task_id}: floor {med(one['floor']):.2f} s, exec "
                f"{med(one['exec']):.2f} s, grade {med(one['grade']):.2f} s, attempt "
                f"{med(one['attempt']):.2f} s ({reps} rounds, {report['parsed_tests']} tests)")
    finally:
        env.close()
    return m, parser_import


def verdict_line(value: float, floor: float) -> str:
    limit = GOAL_RATIO * floor + GOAL_FIXED
    return f"{'meets' if value <= limit else 'MISSES'} goal (<= {limit:.2f} s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default="pypi/inflection", help="swe-mini repository to take instances from")
    parser.add_argument("--n", type=int, default=4, help="instances for the overhead and workers parts")
    parser.add_argument("--reps", type=int, default=3, help="floor / exec repetitions per instance")
    parser.add_argument("--instances", default=None, help="comma-separated ids instead of --repo/--n "
                        "(one repo/version: the first two are the cold and warm runs)")
    parser.add_argument("--keep-home", action="store_true", help=f"keep {HOME}")
    args = parser.parse_args()
    records = [json.loads(line) for line in SUITE.read_text().splitlines() if line.strip()]
    if args.instances:
        ids = [i.strip() for i in args.instances.split(",") if i.strip()]
    else:
        ids = [r["instance_id"] for r in records if r["repo"] == args.repo][:args.n]
    if len(ids) < 2:
        raise SystemExit(f"need at least 2 instances of {args.repo} in {SUITE.name}")
    load0, started = os.getloadavg(), time.perf_counter()
    say(f"ORCHARD_HOME={HOME}; {len(ids)} instances: {', '.join(ids)}")
    rows: list[tuple[str, str]] = []
    try:
        rows += [("ENVIRONMENT REUSE", "")] + cold_warm(ids[0], ids[1])
        say(f"overhead: {len(ids)} instances x {args.reps} floor/exec runs")
        m, parser_import = overhead(ids, args.reps)
        say("workers: --workers 1, then 2")
        w1, rows1 = eval_cli(ids, 1, HOME / "w1")
        w2, rows2 = eval_cli(ids, 2, HOME / "w2")
    finally:
        if not args.keep_home:
            shutil.rmtree(HOME, ignore_errors=True)
    f = med(m["floor"])
    cli = [r["duration_seconds"] for r in rows1]
    cli_ratio = [c / fl for c, fl in zip(cli, m["floor"])] if len(cli) == len(m["floor"]) else []
    rows += [
        (f"GRADING OVERHEAD ({len(ids)} instances, warm, medians)", ""),
        ("floor: bare bwrap, sandbox's argv, eval script", f"{f:6.2f} s  ({len(ids)} instances x "
                                                           f"{args.reps} rounds, interleaved)"),
        ("orchard sandbox.exec of the same script", f"{med(m['exec']):6.2f} s  x{med(m['exec_ratio']):.3f} "
                                                    f"of floor  {med(m['exec']) - f:+.2f} s"),
        ("orchard SWEFamily.grade (apply, run, parse)", f"{med(m['grade']):6.2f} s  x{med(m['grade_ratio']):.3f} "
                                                        f"of floor  {verdict_line(med(m['grade']), f)}"),
        ("  of which its test run (outcome seconds)", f"{med(m['grade_tests']):6.2f} s"),
        ("orchard attempt via API (create+setup+grade+destroy)",
         f"{med(m['attempt']):6.2f} s  x{med(m['attempt_ratio']):.3f} of floor  "
         f"{verdict_line(med(m['attempt']), f)}"),
        ("  create / setup / destroy", f"{med(m['create']):.2f} / {med(m['setup']):.2f} / {med(m['destroy']):.2f} s"),
        ("  once per process: swebench parser import", f"{parser_import:6.2f} s (not in the rows above)"),
        ("orchard eval CLI, per instance (results.jsonl, later)",
         f"{med(cli):6.2f} s  x{med(cli_ratio):.3f} of floor  {verdict_line(med(cli), f)}"),
        ("orchard eval CLI wall / instance (--workers 1)", f"{w1 / len(ids):6.2f} s  (startup, load, scorecard "
                                                           "included)"),
        (f"WORKERS (same {len(ids)} warm instances, 2 cores)", ""),
        ("--workers 1 wall", f"{w1:6.1f} s"),
        ("--workers 2 wall", f"{w2:6.1f} s  speedup x{w1 / w2:.2f}  (per-instance median "
                             f"{med([r['duration_seconds'] for r in rows2]):.2f} s vs {med(cli):.2f} s)"),
        ("load average 1/5/15 min, start -> end", f"{'/'.join(f'{x:.1f}' for x in load0)} -> "
                                                  f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())}, "
                                                  f"bench {time.perf_counter() - started:.0f} s"),
    ]
    width = max(len(k) + (2 if v else 0) for k, v in rows)
    print(f"\n{'measure'.ljust(width)}  value\n{'-' * width}  -----")
    for key, value in rows:
        print(key if not value else f"  {key.ljust(width - 2)}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
