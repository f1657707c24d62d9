"""Verdicts before and after a change to the family seam: the same runs, compared field by field.

Runs `orchard eval` (the installed CLI named by --orchard) over the suites the family-seam
issue lists, then keeps each run's results.jsonl rows without what differs between two runs of
the same code (timestamps, durations, paths, episode ids), sorted, as one JSON file per run:

    calc          gold and empty
    capitals      gold and empty (quiz)
    swe-mini      gold and empty
    claw-mini     gold, 2 attempts
    web-mini      gold
    miniwob       gold on the six tasks with reference steps
    swe-verified  gold on six real instances (pytest 5.4 and 6.0, sphinx 3.2; ../shared/data)

Usage:
    python bench/seam_invariants.py run --orchard /work/main/.venv/bin/orchard --out /tmp/inv-main
    python bench/seam_invariants.py run --orchard .venv/bin/orchard --out /tmp/inv-i31
    python bench/seam_invariants.py compare /tmp/inv-main /tmp/inv-i31      # exit 1 on a difference

`--only NAME,...` runs some of them; `--home DIR` is the ORCHARD_HOME both sides share (built
environments are reused; default /tmp/orchard-seam-home).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
REAL = ["pytest-dev__pytest-7205", "pytest-dev__pytest-7236", "pytest-dev__pytest-7490",
        "pytest-dev__pytest-7571", "sphinx-doc__sphinx-7910", "sphinx-doc__sphinx-8035"]
MINIWOB = ["click-button", "click-link", "enter-text", "focus-text", "click-dialog", "click-checkboxes"]
RUNS: dict[str, list[str]] = {
    "calc-gold": ["calc", "--predictions", "gold"],
    "calc-empty": ["calc", "--predictions", "empty"],
    "capitals-gold": ["capitals", "--predictions", "gold"],
    "capitals-empty": ["capitals", "--predictions", "empty"],
    "swe-mini-gold": ["swe-mini", "--predictions", "gold", "--workers", "2"],
    "swe-mini-empty": ["swe-mini", "--predictions", "empty"],
    "claw-mini-gold": ["claw-mini", "--predictions", "gold", "--attempts", "2", "--workers", "2"],
    "web-mini-gold": ["web-mini", "--predictions", "gold", "--workers", "2"],
    "miniwob-gold": ["miniwob", "--predictions", "gold", "--instances", ",".join(MINIWOB)],
    "swe-real-gold": ["swe-verified", "--dataset", str(DATA / "swe-bench-verified.parquet"), "--instances",
                      ",".join(REAL), "--predictions", "gold", "--repo-mirror", str(DATA / "mirrors"),
                      "--workers", "2"],
}
VOLATILE = {"started_at", "finished_at", "duration_seconds", "log_dir", "episode_id", "trajectory",
            "screenshot"}
"""Timestamps, durations, paths and episode ids (also `tests.seconds`, the grader's timing)."""


def normalized(run: Path) -> list[dict]:
    """results.jsonl without what two runs of the same code do not share, latest line per attempt."""
    rows: dict[tuple[str, int], dict] = {}
    for line in (run / "results.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            kept = {k: v for k, v in row.items() if k not in VOLATILE}
            if isinstance(kept.get("tests"), dict):  # the grader's own timing
                kept["tests"] = {k: v for k, v in kept["tests"].items() if k != "seconds"}
            rows[(row["instance_id"], row["attempt"])] = kept
    return [rows[k] for k in sorted(rows)]


def run(orchard: str, out: Path, home: Path, only: list[str] | None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ORCHARD_HOME": str(home)}
    failed = 0
    for name, args in RUNS.items():
        if only and name not in only:
            continue
        folder = out / "runs" / name
        if folder.exists():
            subprocess.run(["rm", "-rf", str(folder)], check=True)
        started = time.monotonic()
        done = subprocess.run([orchard, "eval", *args, "--out", str(folder), "--max-errors", "1000",
                               "--format", "json"], env=env, capture_output=True, text=True, timeout=7200)
        took = time.monotonic() - started
        if not (folder / "results.jsonl").is_file():
            print(f"{name}: no results (exit {done.returncode}): {done.stderr.strip()[-600:]}", file=sys.stderr)
            failed += 1
            continue
        rows = normalized(folder)
        (out / f"{name}.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
        cats: dict[str, int] = {}
        for row in rows:
            cats[row["category"]] = cats.get(row["category"], 0) + 1
        print(f"{name}: {len(rows)} rows {cats} exit {done.returncode} ({took:.0f} s)", file=sys.stderr)
    return 1 if failed else 0


def renormalize(folder: Path) -> None:
    """Normalize again the runs kept in `folder/runs` (after VOLATILE changed)."""
    for run in sorted((folder / "runs").iterdir()):
        if (run / "results.jsonl").is_file():
            (folder / f"{run.name}.json").write_text(json.dumps(normalized(run), indent=1, sort_keys=True) + "\n")


def compare(a: Path, b: Path) -> int:
    renormalize(a)
    renormalize(b)
    names = sorted({p.name for p in a.glob("*.json")} | {p.name for p in b.glob("*.json")})
    different = 0
    for name in names:
        left = json.loads((a / name).read_text()) if (a / name).is_file() else None
        right = json.loads((b / name).read_text()) if (b / name).is_file() else None
        if left == right:
            print(f"{name}: identical ({len(left or [])} rows)")
            continue
        different += 1
        print(f"{name}: DIFFERENT")
        if left is None or right is None:
            print(f"  only in {'b' if left is None else 'a'}")
            continue
        for x, y in zip(left, right):
            if x != y:
                keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                print(f"  {x.get('instance_id')} #{x.get('attempt')}: " +
                      "; ".join(f"{k}: {x.get(k)!r} -> {y.get(k)!r}" for k in keys)[:1000])
        if len(left) != len(right):
            print(f"  {len(left)} rows -> {len(right)} rows")
    return 1 if different else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--orchard", required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--home", type=Path, default=Path("/tmp/orchard-seam-home"))
    r.add_argument("--only", default=None)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        return run(args.orchard, args.out, args.home, args.only.split(",") if args.only else None)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
