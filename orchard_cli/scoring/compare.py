"""Compare two runs instance by instance: flips, and the paired difference in resolved rate.

Each instance gets a score in each run: the fraction of its attempts that resolved (0 or 1 with
one attempt). Over the instances both runs scored, the difference is mean(score_B - score_A).

The 95% interval is the paired normal (Wald) interval on the per-instance differences d_i:
mean(d) +- 1.96 * sd(d) / sqrt(n), with sd the population standard deviation. With one attempt
per instance this is the interval that goes with McNemar's test: with b instances resolved only
in A and c only in B, diff = (c - b)/n and se = sqrt(b + c - (c - b)^2/n)/n. The exact McNemar
p-value (two-sided binomial test of b against c) is reported next to it. With no discordant
instances the interval collapses to [0, 0]: the runs agree everywhere they were both scored.
"""

from __future__ import annotations

from math import comb, sqrt
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.records import read_json, read_jsonl
from orchard_cli.scoring.scorecard import AttemptResult, latest_results

COMPARE_SCHEMA_VERSION = 1
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
    mcnemar_p: float | None
    """Exact two-sided McNemar p-value (one attempt per instance only)."""
    a_only: list[str]
    """Instances better in A (with one attempt: resolved in A, not in B)."""
    b_only: list[str]
    errors_a: list[str]
    errors_b: list[str]
    warnings: list[str] = Field(default_factory=list)


def load_run(path: str | Path) -> RunScores:
    """A run folder's per-instance scores, from its results.jsonl."""
    path = Path(path)
    results_path = path / "results.jsonl"
    if not results_path.exists():
        raise UsageError(f"{path} is not an orchard eval run (no results.jsonl)",
                         hint="pass the --out folder of an `orchard eval` run")
    rows, _ = read_jsonl(results_path)
    results = latest_results(AttemptResult.model_validate(r) for r in rows)
    totals: dict[str, list[int]] = {}
    errors: set[str] = set()
    for r in results:
        n_c = totals.setdefault(r.instance_id, [0, 0])
        n_c[0] += 1
        n_c[1] += int(r.resolved)
        if r.is_error:
            errors.add(r.instance_id)
    suite = source = ""
    sha = None
    if (path / "config.json").exists():
        config = read_json(path / "config.json")
        suite, source = str(config.get("suite", "")), str(config.get("source", ""))
        sha = config.get("dataset_sha256")
    return RunScores(path=str(path), suite=suite, source=source, dataset_sha256=sha,
                     scores={k: c / n for k, (n, c) in totals.items()}, errors=sorted(errors))


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
        mcnemar_p=mcnemar_exact(len(a_only), len(b_only)) if binary else None,
        a_only=a_only, b_only=b_only,
        errors_a=[i for i in a.errors if i in b.scores], errors_b=[i for i in b.errors if i in a.scores],
        warnings=warnings)


def compare_runs(path_a: str | Path, path_b: str | Path) -> Comparison:
    return compare_scores(load_run(path_a), load_run(path_b))
