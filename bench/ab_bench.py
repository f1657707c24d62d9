"""Two checkouts of orchard, each running its own grade_bench, claw_bench and web_bench, interleaved
(rounds of before/after, the order alternating each round so neither side always runs second on a
warmer machine): the medians of each figure side by side, and after/before ratios.

    .venv/bin/python bench/ab_bench.py --before /path/to/old/checkout --after . --rounds 6

Each checkout runs with its own .venv (`DIR/.venv/bin/python`). The figures compared are the ones
each bench prints (one line each, read with the patterns below); a figure a bench did not print in
some round is left out of that round and counted (the runs column): the medians of the two sides
are then over different rounds.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCHES: dict[str, list[str]] = {
    "claw": ["bench/claw_bench.py", "--limit", "12", "--attempts", "1"],
    "web": ["bench/web_bench.py", "--steps", "20"],
    "grade": ["bench/grade_bench.py", "--n", "2", "--reps", "2"],
}
NUMBER = r"(-?\d+(?:\.\d+)?)"
FIGURES: dict[str, list[tuple[str, str]]] = {
    "claw": [("claw episode, median ms", rf"^episode\s+{NUMBER}"),
             ("claw per attempt beyond the agent, ms", rf"beyond the agent's .*?: {NUMBER} ms"),
             ("claw 12 attempts, 1 worker, wall s", rf"^1\s+{NUMBER}\s")],
    "web": [("web step (act + observe), ms", rf"^step \(act \+ observe\), ms\s+{NUMBER}"),
            ("web browser start cold, ms", rf"^browser start cold, ms\s+{NUMBER}"),
            ("web episode start warm, ms", rf"^episode start warm, ms\s+{NUMBER}")],
    "grade": [("swe cold eval CLI wall (1 instance), s", rf"cold: eval CLI wall, empty home .*?{NUMBER} s"),
              ("swe warm eval CLI wall, s", rf"warm: eval CLI wall, same repo/version\s+{NUMBER} s"),
              ("swe SWEFamily.grade, s", rf"orchard SWEFamily\.grade .*?\s{NUMBER} s"),
              ("swe attempt via API, s", rf"orchard attempt via API .*?\s{NUMBER} s"),
              ("swe eval CLI per instance, s", rf"orchard eval CLI, per instance .*?\s{NUMBER} s")],
}


def run_one(checkout: Path, bench: str, timeout: float) -> dict[str, float]:
    """One run of `bench` in `checkout`: {figure: value} for the figures it printed."""
    python = checkout / ".venv" / "bin" / "python"
    try:
        done = subprocess.run([str(python), *BENCHES[bench]], cwd=checkout, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        print(f"  {checkout}: {bench} ran past {timeout:g} s: this round has no figures of it", file=sys.stderr)
        return {}
    if done.returncode != 0:
        print(f"  {checkout}: {bench} exited {done.returncode}: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return {}
    found: dict[str, float] = {}
    for name, pattern in FIGURES[bench]:
        match = re.search(pattern, done.stdout, re.MULTILINE)
        if match:
            found[name] = float(match.group(1))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=Path("."))
    parser.add_argument("--rounds", type=int, default=6, help="an even number gives each side the first turn equally")
    parser.add_argument("--benches", default="claw,web,grade")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds one bench run may take")
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    for side, path in sides.items():
        if not (path / ".venv" / "bin" / "python").is_file():
            print(f"{path} has no .venv/bin/python ({side})", file=sys.stderr)
            return 2
    benches = [b for b in args.benches.split(",") if b]
    unknown = [b for b in benches if b not in BENCHES]
    if unknown:
        print(f"--benches: unknown {', '.join(unknown)} (known: {', '.join(BENCHES)})", file=sys.stderr)
        return 2
    for side, path in sides.items():  # a copied .venv with an editable install would import the other side
        where = subprocess.run([str(path / ".venv" / "bin" / "python"), "-c", "import orchard_cli; print(orchard_cli.__file__)"],
                               cwd=path, capture_output=True, text=True, timeout=120).stdout.strip()
        print(f"# {side}: {path} imports {where}")
    values: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    started = time.monotonic()
    load = os.getloadavg()
    for round_ in range(args.rounds):
        order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
        for bench in benches:
            for side in order:
                for name, value in run_one(sides[side], bench, args.timeout).items():
                    values[side].setdefault(name, []).append(value)
        print(f"  round {round_ + 1}/{args.rounds} done ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    names = [name for bench in benches for name, _ in FIGURES[bench]]
    width = max(len(n) for n in names) + 2
    print(f"# .venv/bin/python bench/ab_bench.py --before {sides['before']} --after {sides['after']} "
          f"--rounds {args.rounds}")
    print(f"# {os.cpu_count()} cores; load average 1/5/15 min at start "
          f"{'/'.join(f'{x:.1f}' for x in load)}, at end {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'figure (median of rounds)':<{width}}{'before':>10}{'after':>10}{'after/before':>14}{'runs':>8}")
    for name in names:
        a, b = values["before"].get(name, []), values["after"].get(name, [])
        if not a or not b:
            print(f"{name:<{width}}{'-':>10}{'-':>10}{'-':>14}{f'{len(a)}/{len(b)}':>8}")
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        ratio = f"{mb / ma:.2f}" if ma else "-"
        print(f"{name:<{width}}{ma:10.2f}{mb:10.2f}{ratio:>14}{f'{len(a)}/{len(b)}':>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
