"""Synthesis yield on packages outside swe-mini (issue 11): `orchard tasks synth --n N` on each
package in turn, one table: tests collected, unreadable ids, tried, kept, rejected by reason, seconds.
A package synth refuses (a SynthError) is a row with the reason, and the next one runs.

Usage: .venv/bin/python bench/synth_yield.py [--n 5] [--seed 0] [--json OUT] [PKG==VER ...]
Needs bubblewrap, and PyPI for the sdists and environments. One ORCHARD_HOME for the run (a
temporary one), so the packages share no cache with the user's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

PACKAGES = ["isodate==0.7.2", "more-itertools==10.5.0", "tabulate==0.9.0", "jmespath==1.0.1",
            "semver==3.0.2", "parse==1.20.2", "wcwidth==0.2.13", "text-unidecode==1.3"]
"""Pure-Python, real test suites, different styles: pytest classes and parametrize (isodate,
semver, with --cov and doctests in its pytest config), unittest (more-itertools), doctests
(tabulate), plain functions (jmespath, parse, wcwidth, text-unidecode). Tried and left out:
sortedcontainers 2.4.0 (its sdist ships no tests), iso8601 2.1.0 (its test module imports what
its metadata does not declare: the collection fails before any mutation)."""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("packages", nargs="*", default=PACKAGES)
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="orchard-synth-yield-")
    os.environ["ORCHARD_HOME"] = home
    from orchard_cli.tasks.synth.synth import SynthConfig, synthesize

    rows = []
    try:
        for package in args.packages:
            started = time.monotonic()
            try:
                _, report = synthesize(SynthConfig(packages=[package], n=args.n, seed=args.seed),
                                       say=lambda line: print(f"  {line}", file=sys.stderr))
                p = report.packages[0]
                row = {"package": package, "tests": p.tests, "unreadable": p.unreadable, "flaky": p.flaky,
                       "candidates": p.candidates, "tried": p.tried, "kept": p.kept, "rejected": p.rejected,
                       "seconds": round(time.monotonic() - started, 1), "error": None}
            except Exception as exc:  # noqa: BLE001 - a refused package is a row, the next one runs
                row = {"package": package, "tests": None, "unreadable": None, "flaky": None, "candidates": None,
                       "tried": None, "kept": 0, "rejected": {}, "seconds": round(time.monotonic() - started, 1),
                       "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
            rows.append(row)
            print(f"{row['package']:28s} tests={row['tests']} kept={row['kept']}/{row['tried']} "
                  f"{row['seconds']}s {row['error'] or row['rejected']}", flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print("\n| package | tests | unreadable ids | flaky | tried | kept | rejected by reason | s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rejected = ", ".join(f"{k} {v}" for k, v in sorted(r["rejected"].items())) or "-"
        print(f"| {r['package']} | {r['tests'] if r['tests'] is not None else '-'} | {r['unreadable'] if r['unreadable'] is not None else '-'} | "
              f"{r['flaky'] if r['flaky'] is not None else '-'} | {r['tried'] if r['tried'] is not None else '-'} | {r['kept']} | "
              f"{r['error'] or rejected} | {r['seconds']} |")
    good = sum(r["kept"] >= args.n for r in rows)
    print(f"\n{good} of {len(rows)} packages gave {args.n} valid tasks (goal: 6 of 8)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
