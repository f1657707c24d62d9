"""Synthesis yield on packages outside swe-mini (issue 11): `orchard tasks synth --n N` on each
package in turn, one table: tests collected, unreadable ids, tried, kept, rejected by reason, seconds.
A package synth refuses (a SynthError) is a row with the reason, and the next one runs.

Usage: .venv/bin/python bench/synth_yield.py [--set breadth|issue11] [--n 5] [--seed 0] [--json OUT] [PKG==VER ...]
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
"""The table of issue 11: pure-Python, real test suites, different styles: pytest classes and
parametrize (isodate, semver, with --cov and doctests in its pytest config), unittest
(more-itertools), doctests (tabulate), plain functions (jmespath, parse, wcwidth, text-unidecode).
Tried and left out then: sortedcontainers 2.4.0 (its sdist ships no tests), iso8601 2.1.0 (its
test module imports what its metadata does not declare)."""

BREADTH = ["six==1.16.0", "idna==3.7", "tomli==2.0.1", "packaging==24.0", "click==8.1.7",
           "itsdangerous==2.2.0", "pyflakes==3.2.0", "pycodestyle==2.11.1", "mccabe==0.7.0",
           "sqlparse==0.5.0", "python-dateutil==2.9.0.post0", "humanize==4.9.0", "Markdown==3.6",
           "natsort==8.4.0", "prettytable==3.10.0", "xmltodict==0.13.0", "marshmallow==3.21.1",
           "zipp==3.18.1", "arrow==1.3.0", "pytz==2024.1"]
"""The table of issue 32, written down (and committed) before any of them was tried: 20 pure-Python
packages in none of swe-mini, the table above or the docs, across test styles: pytest functions
(six, mccabe, pycodestyle), classes (itsdangerous, marshmallow), parametrized with odd ids
(packaging, sqlparse, humanize), unittest (idna, tomli, pyflakes, Markdown, xmltodict), doctests
(pytz), plugins and helpers named by their test requirements (natsort: hypothesis, pytest-mock;
prettytable: pytest-lazy-fixtures; arrow: pytest-mock; python-dateutil: hypothesis, freezegun),
test extras or requirement files (click, itsdangerous, humanize, marshmallow, zipp's `testing`).
Goal: at least 5 valid tasks from at least 18 of the 20."""
SETS = {"issue11": PACKAGES, "breadth": BREADTH}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("packages", nargs="*")
    parser.add_argument("--set", choices=sorted(SETS), default="breadth", help="the named list when no package is given")
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    args.packages = args.packages or SETS[args.set]
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
                       "failing": p.failing, "unstable": p.unstable, "candidates": p.candidates,
                       "tried": p.tried, "kept": p.kept, "rejected": p.rejected,
                       "seconds": round(time.monotonic() - started, 1), "error": p.refused,
                       "phases": p.seconds}
            except Exception as exc:  # noqa: BLE001 - a refused package is a row, the next one runs
                row = {"package": package, "tests": None, "unreadable": None, "flaky": None, "failing": None,
                       "unstable": None, "candidates": None,
                       "tried": None, "kept": 0, "rejected": {}, "seconds": round(time.monotonic() - started, 1),
                       "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
            rows.append(row)
            print(f"{row['package']:28s} tests={row['tests']} kept={row['kept']}/{row['tried']} "
                  f"{row['seconds']}s {row['error'] or row['rejected']}", flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print("\n| package | tests kept | left out: failing, unreadable, moving, flaky | tried | kept | rejected by reason | s |")
    print("|---|---|---|---|---|---|---|")
    dash = lambda v: "-" if v is None else v  # noqa: E731
    for r in rows:
        rejected = ", ".join(f"{k} {v}" for k, v in sorted(r["rejected"].items())) or "-"
        left = ", ".join(str(dash(r[k])) for k in ("failing", "unreadable", "unstable", "flaky"))
        print(f"| {r['package']} | {dash(r['tests'])} | {left} | {dash(r['tried'])} | {r['kept']} | "
              f"{'refused: ' + r['error'] if r['error'] else rejected} | {r['seconds']} |")
    good = sum(r["kept"] >= args.n for r in rows)
    print(f"\n{good} of {len(rows)} packages gave {args.n} valid tasks")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
