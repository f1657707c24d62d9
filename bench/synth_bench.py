"""`orchard tasks synth` benchmark: synthesis throughput and the bundled suite's validation cost.

  synthesis   one run from an empty ORCHARD_HOME on one package: tasks kept per minute (wall,
              everything included; and search + validation only), the share of tried mutants
              kept, by kind
  validation  every task of a suite (default: the bundled swe-mini) validated as synthesis does
              it (fresh sandboxes: gold resolves; unpatched, FAIL_TO_PASS fail, PASS_TO_PASS
              pass): cold (empty ORCHARD_HOME: sdists downloaded, environments built) and warm
              (the same home again)

Usage: .venv/bin/python bench/synth_bench.py [--package inflection==0.5.1] [--n 5] [--seed 0]
         [--suite tasks/data/swe-mini.jsonl] [--limit K] [--skip-synth] [--skip-validate]
Needs bubblewrap, and PyPI for the sdists and environments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SUITE = HERE / "tasks" / "data" / "swe-mini.jsonl"


def fresh_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="orchard-synth-bench-"))
    os.environ["ORCHARD_HOME"] = str(home)
    return home


def synthesis(package: str, n: int, seed: int) -> dict:
    from orchard_cli.tasks.synth.synth import SynthConfig, synthesize

    home = fresh_home()
    started = time.monotonic()
    tasks, report = synthesize(SynthConfig(packages=[package], n=n, seed=seed),
                               say=lambda line: print(f"  {line}", file=sys.stderr))
    wall = time.monotonic() - started
    shutil.rmtree(home, ignore_errors=True)
    p = report.packages[0]
    busy = p.seconds.get("search", 0) + p.seconds.get("validate", 0)
    return {"package": package, "kept": p.kept, "tried": p.tried, "wall_s": wall,
            "per_min_wall": p.kept / wall * 60, "per_min_search": p.kept / busy * 60 if busy else 0,
            "kinds": {k: (v.kept, v.tried) for k, v in p.kinds.items()},
            "rejected": p.rejected, "seconds": p.seconds}


def validate_suite(records: list[dict]) -> tuple[float, list[str]]:
    from orchard_cli.env import connect
    from orchard_cli.tasks.registry import load_family
    from orchard_cli.tasks.synth.validate import validate

    family = load_family("swe")
    env = connect("local")
    problems = []
    started = time.monotonic()
    try:
        for i, record in enumerate(records, 1):
            problem = validate(family, env, record)
            print(f"  [{i}/{len(records)}] {record['instance_id']}: {problem or 'valid'}", file=sys.stderr)
            if problem:
                problems.append(f"{record['instance_id']}: {problem}")
    finally:
        env.close()
    return time.monotonic() - started, problems


def eval_cold(limit: int) -> list[tuple[str, str]]:
    """The README's first SWE command on a fresh ORCHARD_HOME, as a subprocess (wall time)."""
    import subprocess

    home = fresh_home()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "orchard_cli.main", "eval", "swe-mini", "--limit",
                           str(limit), "--predictions", "gold", "--out", str(home / "run"),
                           "--format", "json"], capture_output=True, text=True)
    wall = time.monotonic() - started
    shutil.rmtree(home, ignore_errors=True)
    try:
        resolved = json.loads(done.stdout)["resolved"]
    except (ValueError, KeyError):
        resolved = f"? (exit {done.returncode})"
    return [(f"orchard eval swe-mini --limit {limit} --predictions gold, cold",
             f"{wall:.0f} s, resolved {resolved}/{limit}")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="inflection==0.5.1")
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--suite", default=str(SUITE))
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--skip-synth", action="store_true")
    parser.add_argument("--skip-validate", action="store_true")
    parser.add_argument("--eval-limit", type=int, default=3,
                        help="also time `orchard eval swe-mini --limit K --predictions gold`, cold (0: skip)")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    if not args.skip_synth:
        print(f"synthesis: {args.package}, --n {args.n}, from an empty ORCHARD_HOME", file=sys.stderr)
        s = synthesis(args.package, args.n, args.seed)
        rows += [(f"synthesis {s['package']}: kept / tried", f"{s['kept']} / {s['tried']} "
                  f"({s['kept'] / max(s['tried'], 1):.0%} kept)"),
                 ("  wall (fetch, env, baseline, search, validate)",
                  f"{s['wall_s']:.0f} s  " + " ".join(f"{k} {v:g}" for k, v in s["seconds"].items())),
                 ("  tasks per minute, wall", f"{s['per_min_wall']:.2f}"),
                 ("  tasks per minute, search + validation", f"{s['per_min_search']:.2f}"),
                 ("  rejected", ", ".join(f"{k} {v}" for k, v in sorted(s["rejected"].items())) or "-"),
                 ("  kept / tried by kind", ", ".join(f"{k} {a}/{b}" for k, (a, b) in s["kinds"].items()))]
    if not args.skip_validate:
        records = [json.loads(line) for line in Path(args.suite).read_text().splitlines() if line.strip()]
        records = records[:args.limit] if args.limit else records
        home = fresh_home()
        print(f"validation of {len(records)} tasks, cold", file=sys.stderr)
        cold, problems = validate_suite(records)
        print(f"validation of {len(records)} tasks, warm", file=sys.stderr)
        warm, problems_warm = validate_suite(records)
        shutil.rmtree(home, ignore_errors=True)
        rows += [(f"validate {len(records)} tasks of {Path(args.suite).name}, cold",
                  f"{cold:.0f} s ({cold / len(records):.1f} s/task)"),
                 ("  warm (environments and sdists cached)", f"{warm:.0f} s ({warm / len(records):.1f} s/task)"),
                 ("  invalid (cold / warm)", f"{len(problems)} / {len(problems_warm)}")]
        for problem in problems + problems_warm:
            rows.append(("  !", problem[:100]))
    if args.eval_limit:
        rows += eval_cold(args.eval_limit)
    width = max(len(k) for k, _ in rows)
    print(f"\n{'measure'.ljust(width)}  value\n{'-' * width}  -----")
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
