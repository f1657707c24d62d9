"""Compare two runs instance by instance: flips, and the paired difference in resolved rate.

Each instance gets a score in each run: the fraction of its attempts that resolved (0 or 1 with
one attempt). Over the instances both runs scored, the difference is mean(score_B - score_A).

The 95% interval is the paired normal (Wald) interval on the per-instance differences d_i:
mean(d) +- 1.96 * sd(d) / sqrt(n), with sd the population standard deviation. With one attempt
per instance this is the interval that goes with McNemar's test: with b instances resolved only
in A and c only in B, diff = (c - b)/n and se = sqrt(b + c - (c - b)^2/n)/n. The exact McNemar
p-value (two-sided binomial test of b against c) is reported next to it. With no discordant
instances the interval collapses to [0, 0]: the runs agree everywhere they were both scored.
When every instance moved the same way (all differences equal and not 0: three tasks resolved
in A and none in B) the normal interval collapses too, to a point that is not a confidence
interval: `ci_note` says so, and people read McNemar's exact p instead.

`by_group` repeats the comparison per group value of each grouping the tasks declare (claw:
category=mail, difficulty=hard; SWE: repo), over the common instances of that value: the resolved
rate of each run, B - A, and pass^k (with its difference) for the k both runs can estimate, when
both ran more than one attempt per instance. Errors count as not resolved, as in the headline.
"""

from __future__ import annotations

from math import comb, sqrt
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.scoring.scorecard import pass_hat_k

COMPARE_SCHEMA_VERSION = 2  # 2: by_group
Z95 = 1.959963984540054


class RunScores(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    suite: str = ""
    source: str = ""
    dataset_sha256: str | None = None
    scores: dict[str, float]
    """instance_id -> fraction of attempts resolved."""
    errors: list[str] = Field(default_factory=list)
    """Instances with an env/infra error in any attempt."""
    counts: dict[str, tuple[int, int]] = Field(default_factory=dict)
    """instance_id -> (attempts, resolved)."""
    groups: dict[str, dict[str, str]] = Field(default_factory=dict)
    """instance_id -> its groupings ({'category': 'mail'}; {'repo': ...} for runs without groups)."""


class GroupDelta(BaseModel):
    """One group value compared over the instances of it both runs scored."""

    model_config = ConfigDict(extra="forbid")

    instances: int
    rate_a: float
    """Resolved rate of A over the group's common instances (mean per-instance fraction)."""
    rate_b: float
    diff: float
    """rate_b - rate_a."""
    pass_hat_k_a: dict[int, float] | None = None
    """pass^k of A for each k both runs have (k <= every common instance's attempts in both);
    None unless both ran more than one attempt."""
    pass_hat_k_b: dict[int, float] | None = None
    pass_hat_k_diff: dict[int, float] | None = None
    """pass^k of B - pass^k of A, per k."""


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = COMPARE_SCHEMA_VERSION
    run_a: str
    run_b: str
    common: int
    """Instances scored in both runs (the paired sample)."""
    only_in_a: list[str]
    only_in_b: list[str]
    rate_a: float
    """Resolved rate of A over the common instances."""
    rate_b: float
    diff: float
    """rate_b - rate_a."""
    ci95: tuple[float, float]
    ci_method: str = "paired normal interval on per-instance differences (McNemar-style Wald)"
    ci_note: str | None = None
    """Why `ci95` is not to be read: every paired instance moved the same way (the normal
    interval has no variation to measure and collapses to a point); read the exact p-value."""
    mcnemar_p: float | None
    """Exact two-sided McNemar p-value (one attempt per instance only)."""
    a_only: list[str]
    """Instances better in A (with one attempt: resolved in A, not in B)."""
    b_only: list[str]
    errors_a: list[str]
    errors_b: list[str]
    by_group: dict[str, dict[str, GroupDelta]] = Field(default_factory=dict)
    """grouping -> value -> the comparison over that value's common instances."""
    warnings: list[str] = Field(default_factory=list)


def load_run(path: str | Path) -> RunScores:
    """A run folder's per-instance scores, from its results.jsonl."""
    from orchard_cli.runs import RunFolder

    path = Path(path)
    folder = RunFolder(path).require()
    results = folder.latest_results()
    totals: dict[str, list[int]] = {}
    errors: set[str] = set()
    groups: dict[str, dict[str, str]] = {}
    for r in results:
        groups[r.instance_id] = r.groups or ({"repo": r.repo} if r.repo else {})
        n_c = totals.setdefault(r.instance_id, [0, 0])
        n_c[0] += 1
        n_c[1] += int(r.resolved)
        if r.is_error:
            errors.add(r.instance_id)
    suite = source = ""
    sha = None
    if folder.config.exists():
        config = folder.read_config()
        suite, source = str(config.get("suite", "")), str(config.get("source", ""))
        sha = config.get("dataset_sha256")
    return RunScores(path=str(path), suite=suite, source=source, dataset_sha256=sha,
                     scores={k: c / n for k, (n, c) in totals.items()}, errors=sorted(errors),
                     counts={k: (n, c) for k, (n, c) in totals.items()}, groups=groups)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: binomial test of min(b, c) under p = 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_interval(diffs: list[float], z: float = Z95) -> tuple[float, float, float]:
    """(mean, low, high) of the paired normal interval on per-item differences."""
    n = len(diffs)
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / n
    half = z * sqrt(var / n)
    return mean, mean - half, mean + half


def _pass_hat(run: RunScores, ids: list[str], ks: list[int]) -> dict[int, float]:
    return {k: sum(pass_hat_k(*run.counts[i], k) for i in ids) / len(ids) for k in ks}


def group_deltas(a: RunScores, b: RunScores, common: list[str]) -> dict[str, dict[str, GroupDelta]]:
    """Per grouping and value (B's record of the instance, else A's), over the common instances."""
    members: dict[str, dict[str, list[str]]] = {}
    for i in common:
        for name, value in (b.groups.get(i) or a.groups.get(i) or {}).items():
            members.setdefault(name, {}).setdefault(value or "(none)", []).append(i)
    out: dict[str, dict[str, GroupDelta]] = {}
    for name in sorted(members):
        for value, ids in sorted(members[name].items()):
            rate_a = sum(a.scores[i] for i in ids) / len(ids)
            rate_b = sum(b.scores[i] for i in ids) / len(ids)
            delta = GroupDelta(instances=len(ids), rate_a=rate_a, rate_b=rate_b, diff=rate_b - rate_a)
            ns = [run.counts[i][0] for run in (a, b) for i in ids if i in run.counts]
            if len(ns) == 2 * len(ids) and min(ns) > 1:  # both ran several attempts of each
                ks = list(range(1, min(ns) + 1))
                delta.pass_hat_k_a, delta.pass_hat_k_b = _pass_hat(a, ids, ks), _pass_hat(b, ids, ks)
                delta.pass_hat_k_diff = {k: delta.pass_hat_k_b[k] - delta.pass_hat_k_a[k] for k in ks}
            out.setdefault(name, {})[value] = delta
    return out


def group_lines(result: Comparison) -> list[str]:
    """The per-group deltas for people, one line per group value (pass^k at the largest k)."""
    def pct(value: float) -> str:
        return f"{100 * value:.1f}%"

    lines = []
    for name, values in result.by_group.items():
        for value, d in values.items():
            line = (f"{name}={value} ({d.instances}): A {pct(d.rate_a)}  B {pct(d.rate_b)}  "
                    f"B - A {100 * d.diff:+.1f} points")
            if d.pass_hat_k_diff:
                k = max(d.pass_hat_k_diff)
                a_k, b_k = (d.pass_hat_k_a or {})[k], (d.pass_hat_k_b or {})[k]
                line += (f"; pass^{k}: A {pct(a_k)}  B {pct(b_k)}  "
                         f"B - A {100 * d.pass_hat_k_diff[k]:+.1f} points")
            lines.append(line)
    return lines


def compare_scores(a: RunScores, b: RunScores) -> Comparison:
    common = sorted(set(a.scores) & set(b.scores))
    warnings = []
    if not common:
        raise UsageError(f"{a.path} and {b.path} have no instance in common")
    if a.suite and b.suite and a.suite != b.suite:
        warnings.append(f"different suites: {a.suite} vs {b.suite}")
    if a.dataset_sha256 and b.dataset_sha256 and a.dataset_sha256 != b.dataset_sha256:
        warnings.append("different dataset files (sha256 differs): the same ids may hold different tasks")
    diffs = [b.scores[i] - a.scores[i] for i in common]
    mean, low, high = paired_interval(diffs)
    binary = all(a.scores[i] in (0.0, 1.0) and b.scores[i] in (0.0, 1.0) for i in common)
    a_only = [i for i in common if a.scores[i] > b.scores[i]]
    b_only = [i for i in common if b.scores[i] > a.scores[i]]
    return Comparison(
        run_a=a.path, run_b=b.path, common=len(common),
        only_in_a=sorted(set(a.scores) - set(b.scores)), only_in_b=sorted(set(b.scores) - set(a.scores)),
        rate_a=sum(a.scores[i] for i in common) / len(common),
        rate_b=sum(b.scores[i] for i in common) / len(common),
        diff=mean, ci95=(low, high),
        ci_note=("every paired instance moved the same way, so the normal interval collapses to a point; "
                 "read the exact p-value" if low == high and mean != 0 else None),
        mcnemar_p=mcnemar_exact(len(a_only), len(b_only)) if binary else None,
        a_only=a_only, b_only=b_only,
        errors_a=[i for i in a.errors if i in b.scores], errors_b=[i for i in b.errors if i in a.scores],
        by_group=group_deltas(a, b, common) if a.counts and b.counts else {}, warnings=warnings)


def compare_runs(path_a: str | Path, path_b: str | Path) -> Comparison:
    return compare_scores(load_run(path_a), load_run(path_b))
