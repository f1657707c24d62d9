"""The paired comparison of two arms on the same held-out tasks: McNemar's exact test.

Attempts are paired by (task, attempt number). Only discordant pairs carry information: `b` where
the first arm resolved and the second did not, `c` the other way round. Under the null (neither
arm is better) each discordant pair goes either way with probability 1/2, so the two-sided exact
p-value is 2 * P(X <= min(b, c)) for X ~ Binomial(b + c, 1/2), capped at 1 (1 when b + c = 0).
"""

from __future__ import annotations

from math import comb
from pathlib import Path
from typing import Any


def mcnemar_exact(b: int, c: int) -> float:
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def outcomes(run: Path) -> dict[tuple[str, int], bool]:
    """(task id, attempt) -> resolved, the latest line of each in the run's results.jsonl."""
    from orchard_cli.runs import RunFolder

    return {(r.instance_id, r.attempt): bool(r.resolved) for r in RunFolder(run).latest_results()}


def paired(first: Path, second: Path) -> dict[str, Any]:
    """McNemar's exact test of `second` against `first` over the attempts both made."""
    a, b_runs = outcomes(first), outcomes(second)
    keys = sorted(set(a) & set(b_runs))
    only_first = sum(1 for k in keys if a[k] and not b_runs[k])
    only_second = sum(1 for k in keys if b_runs[k] and not a[k])
    return {"pairs": len(keys), "both": sum(1 for k in keys if a[k] and b_runs[k]),
            "neither": sum(1 for k in keys if not a[k] and not b_runs[k]),
            "only_first": only_first, "only_second": only_second,
            "p_value": mcnemar_exact(only_first, only_second),
            "first_rate": sum(a[k] for k in keys) / len(keys) if keys else 0.0,
            "second_rate": sum(b_runs[k] for k in keys) / len(keys) if keys else 0.0}
