"""The per-attempt result record (`results.jsonl`) and the scorecard computed from those records.

The unit of scoring is one *instance attempt*: `total` counts instances x attempts. With one
attempt per instance (the default) that is the number of instances.

Categories are the family's (`orchard_cli.outcome`: the core ones plus those the family
declares); the scorecard keeps their labels and colours, so it renders from disk alone. Groupings
are the family's too (`by_group`: SWE groups by repository, which `by_repo` repeats for readers of
the first scorecards).

Headline: `resolved_rate = resolved / total`, over ALL attempts, where an attempt that ended in an
env/infra error counts as not resolved. This is the number comparable with SWE-bench's
leaderboards (which divide by every instance of the split). Errors are never hidden in it: they
are counted apart (`errors`, `by_category`), `resolved_rate_graded = resolved / graded` is shown
next to it, and `orchard eval` exits 3 when more instances errored than `--max-errors` allows, so
a run that could not grade does not pass in CI.

pass@k and pass^k (attempts > 1) use the unbiased estimators over the n attempts of each task with
c of them resolved, averaged over tasks: pass@k = 1 - C(n-c, k)/C(n, k) (at least one of k
attempts drawn without replacement succeeds) and pass^k = C(c, k)/C(n, k) (all k succeed). Every
group value (`by_group`) has them too, for the same k, averaged over the group's tasks.

Families graded by checks (claw) also get the mean check score (`mean_score`, the share of checks
passed, over all attempts with errors as 0; `mean_score_graded` beside it) overall and per group,
and how often each check passed (`by_check`, `by_check_kind`; `orchard_cli.scoring.checks`).
The rule is the same for every family. docs/scorecard.md documents every field.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from math import comb
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.outcome import CORE_CATEGORIES, ERROR_CATEGORIES, CategoryInfo, category_info, ordered_categories
from orchard_cli.scoring.checks import CheckScore, score_checks

# results.jsonl stays at 1: checks, check_kinds and score were added as optional fields (defaults),
# so every line written before them reads as it did.
RESULT_SCHEMA_VERSION = 1
# 2: mean_score, mean_score_graded, per-group mean_score / pass@k / pass^k, by_check, by_check_kind.
# Version-1 scorecards load unchanged: the new fields have defaults.
SCORECARD_SCHEMA_VERSION = 2

# The categories of scorecards written before families declared their own (SWE's).
LEGACY_CATEGORIES = ordered_categories({
    "empty_patch": CategoryInfo(label="empty patch", color="#c7cdd6"),
    "patch_apply_failed": CategoryInfo(label="patch did not apply", color="#e2a03f")})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AttemptResult(_Model):
    """One line of `results.jsonl`: one attempt at one instance, graded or failed."""

    schema_version: int = RESULT_SCHEMA_VERSION
    instance_id: str
    attempt: int = Field(ge=1)
    """1-based attempt number."""
    episode_id: str | None = None
    """The episode's id (`trajectory.episode_key`); absent in runs of orchard before 0.2."""
    repo: str = ""
    groups: dict[str, str] = Field(default_factory=dict)
    """The scorecard groupings this task belongs to, as its family says ({'repo': 'acme/calc'})."""
    resolved: bool = False
    category: str
    tests: dict[str, Any] = Field(default_factory=dict)
    """Test counts as the family reports them (for SWE: FAIL_TO_PASS / PASS_TO_PASS passed/failed;
    for claw: passed, failed, total, score, summary)."""
    checks: dict[str, bool] = Field(default_factory=dict)
    """Check id -> passed, in task order, for families graded by checks; {} otherwise (and in
    version-1 records)."""
    check_kinds: dict[str, str] = Field(default_factory=dict)
    """Check id -> its kind (claw: state, safety, dispatch, answer, command)."""
    score: float | None = None
    """Share of checks passed (0..1); None when the family reports no checks or the grader never ran."""
    duration_seconds: float = 0.0
    patch_bytes: int = 0
    patch_files: int = 0
    log_dir: str = ""
    """Folder (relative to the run folder) with the test output, the patch and the eval script."""
    error: str | None = None
    """The cause, in one line, for env_error / infra_error / timeout."""
    model: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    """None when no model ran, or when the model's price is unknown (never 0 for 'unknown')."""
    trajectory: str | None = None
    steps: int | None = None
    """Tool calls made (browser actions, task tools); None when the episode made none."""
    screenshot: str | None = None
    """The page as the episode left it (web families): a PNG beside `log_dir`'s evidence, relative
    to the run folder."""
    judge: dict[str, Any] | None = None
    """An LLM judge's verdict (`--judge-model`): model, score (0..1), rationale, error. Beside the
    verdict, never inside it."""
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def is_error(self) -> bool:
        return self.category in ERROR_CATEGORIES


class RepoScore(_Model):
    """The score of one group value (a repository, a category such as 'mail', a difficulty)."""

    total: int = 0
    resolved: int = 0
    errors: int = 0
    resolved_rate: float = 0.0
    """resolved / total (errors count as not resolved, as in the headline)."""
    mean_score: float | None = None
    """Mean check score over all the group's attempts (errors count 0); None without checks."""
    pass_at_k: dict[int, float] | None = None
    """pass@k over the group's tasks, for the headline's k; None with one attempt."""
    pass_hat_k: dict[int, float] | None = None
    mean_steps: float | None = None
    """Mean tool calls over the attempts that made any (browser actions, task tools)."""
    mean_tokens: float | None = None
    """Mean model tokens (in + out) per attempt; None when no model ran."""


class BenchmarkScore(_Model):
    """The benchmark's own verdict (`benchmark_passed` in an attempt's tests), counted as its
    authors count it: the rate over all attempts (errors as not passed), pass@k and pass^k, its
    own score's mean. Its leaderboard's headline is pass^k at k = the attempts of each task
    (Claw-Eval's Pass^3: every one of 3 attempts passes): `lead` and `lead_k`."""

    name: str | None = None
    """The benchmark, as its family names it ('Claw-Eval')."""
    passed: int = 0
    rate: float = 0.0
    pass_at_k: dict[int, float] | None = None
    pass_hat_k: dict[int, float] | None = None
    mean_score: float | None = None
    """The benchmark's own score of an attempt (`tests.score`), averaged over all attempts (errors
    count 0); None when its attempts report none."""
    lead_k: int = 1
    """The k its leaderboard leads with: every task's number of attempts (1 with one attempt)."""
    lead: float = 0.0
    """pass^lead_k: the share of tasks that passed every one of lead_k attempts (the rate with one)."""


class Tokens(_Model):
    input: int = 0
    output: int = 0


class Reproducibility(_Model):
    orchard_version: str
    harness: str | None = None
    harness_version: str | None = None
    dataset_sha256: str | None = None
    seed: int | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    """The run's full configuration, as in config.json."""


class Scorecard(_Model):
    """`scorecard.json`: what a run scored, and everything needed to reproduce it."""

    schema_version: int = SCORECARD_SCHEMA_VERSION
    suite: str
    source: str
    """What produced the patches: 'gold', 'empty', 'predictions:<file>' or 'model:<name>@<harness>'."""
    instances: int
    attempts: int
    """Attempts per instance (the most any instance had)."""
    total: int
    """Instance attempts scored (instances x attempts)."""
    resolved: int
    errors: int
    """Attempts that ended in env_error or infra_error (counted apart, never 'unresolved')."""
    instances_with_errors: int
    graded: int
    """total - errors: attempts the family's grader actually judged."""
    resolved_rate: float
    """The headline: resolved / total (errors count as not resolved)."""
    resolved_rate_graded: float | None
    """resolved / graded; None when nothing was graded."""
    headline: Literal["resolved_rate"] = "resolved_rate"
    family: str | None = None
    categories: dict[str, CategoryInfo] = Field(default_factory=lambda: dict(LEGACY_CATEGORIES))
    """Every category of the family, in display order, with its label and colour."""
    by_category: dict[str, int]
    by_repo: dict[str, RepoScore]
    """Per repository (the SWE grouping; the same as by_group['repo'])."""
    by_group: dict[str, dict[str, RepoScore]] = Field(default_factory=dict)
    """Per grouping the family declares (repo, category, difficulty, site...), per value."""
    pass_at_k: dict[int, float] | None = None
    pass_hat_k: dict[int, float] | None = None
    mean_score: float | None = None
    """Mean check score (share of checks passed) over ALL attempts, errors and attempts without a
    score counting 0; None when no attempt reported a score (SWE)."""
    mean_score_graded: float | None = None
    """The same over graded attempts only (total - errors); None when none was graded."""
    benchmark: BenchmarkScore | None = None
    """A benchmark's own pass verdict beside orchard's (`tests.benchmark_passed`; Claw-Eval: score
    >= 0.75), over all attempts; None when the family reports none."""
    judged: int = 0
    """Attempts an LLM judge scored (`--judge-model`)."""
    judge_mean: float | None = None
    """The judge's mean score over those attempts; beside the verdicts, never inside them."""
    judge_agreement: float | None = None
    """How often the judge (score >= 0.5) and the checks (resolved) agree, over the judged attempts."""
    by_check: dict[str, CheckScore] = Field(default_factory=dict)
    """Per check of each task, keyed '<task id>/<check id>': how often it passed."""
    by_check_kind: dict[str, CheckScore] = Field(default_factory=dict)
    """Per check kind (state, safety, ...), summed over every task's checks of that kind."""
    tokens: Tokens | None = None
    """Summed over attempts when a model ran; None otherwise."""
    cost_usd: float | None = None
    """Summed when every attempt's cost is known; None when no model ran or a price is unknown."""
    cost_known: bool = False
    missing: int = 0
    """Selected instance attempts without a result (an interrupted run)."""
    complete: bool = True
    wall_seconds: float = 0.0
    """Seconds the run took, summed over the sessions of a resumed run."""
    started_at: float = 0.0
    finished_at: float = Field(default_factory=time.time)
    reproducibility: Reproducibility


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: chance that at least one of k of its n attempts succeeds."""
    if k > n or k < 1:
        raise ValueError(f"pass@k needs 1 <= k <= n (k={k}, n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k for one task: chance that all of k of its n attempts succeed."""
    if k > n or k < 1:
        raise ValueError(f"pass^k needs 1 <= k <= n (k={k}, n={n})")
    return comb(c, k) / comb(n, k)


def latest_results(results: Iterable[AttemptResult | dict[str, Any]]) -> list[AttemptResult]:
    """One result per (instance, attempt): the last one written wins (a retried error on resume)."""
    latest: dict[tuple[str, int], AttemptResult] = {}
    for item in results:
        result = item if isinstance(item, AttemptResult) else AttemptResult.model_validate(item)
        latest[(result.instance_id, result.attempt)] = result
    return sorted(latest.values(), key=lambda r: (r.instance_id, r.attempt))


def per_instance(results: list[AttemptResult]) -> dict[str, tuple[int, int]]:
    """instance_id -> (n attempts, c resolved)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        counts[r.instance_id][0] += 1
        counts[r.instance_id][1] += int(r.resolved)
    return {k: (v[0], v[1]) for k, v in counts.items()}


def pass_rates(counts: dict[str, tuple[int, int]], ks: list[int]) -> tuple[dict[int, float], dict[int, float]]:
    """(pass@k, pass^k) averaged over tasks ({instance: (n, c)}), for each k (k <= every n)."""
    return ({k: sum(pass_at_k(n, c, k) for n, c in counts.values()) / len(counts) for k in ks},
            {k: sum(pass_hat_k(n, c, k) for n, c in counts.values()) / len(counts) for k in ks})


def benchmark_score(rows: list[AttemptResult], ks: list[int], name: str | None = None) -> BenchmarkScore | None:
    """The benchmark's own pass rate and pass@k / pass^k, when the family reports its verdict
    (`name`: the benchmark it declares; else any attempt's `tests.benchmark_passed` says so)."""
    if not rows or (name is None and not any("benchmark_passed" in r.tests for r in rows)):
        return None
    flags = {id(r): bool(r.tests.get("benchmark_passed")) and not r.is_error for r in rows}
    passed = sum(flags.values())
    scored = [r for r in rows if isinstance(r.tests.get("score"), (int, float))]
    score = BenchmarkScore(name=name, passed=passed, rate=passed / len(rows),
                           lead=passed / len(rows),
                           mean_score=(sum(0.0 if r.is_error else float(r.tests.get("score") or 0.0) for r in rows)
                                       / len(rows)) if scored or name else None)
    if ks:
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in rows:
            counts[r.instance_id][0] += 1
            counts[r.instance_id][1] += int(flags[id(r)])
        score.pass_at_k, score.pass_hat_k = pass_rates({k: (v[0], v[1]) for k, v in counts.items()}, ks)
        score.lead_k = max(ks)
        score.lead = score.pass_hat_k[score.lead_k]
    return score


def judge_summary(rows: list[AttemptResult]) -> dict[str, Any]:
    """judged, judge_mean, judge_agreement over the rows a judge scored."""
    scored = [r for r in rows if r.judge and r.judge.get("score") is not None and not r.is_error]
    if not scored:
        return {}
    scores = [float(r.judge["score"]) for r in scored]  # type: ignore[index]
    agree = sum((s >= 0.5) == r.resolved for s, r in zip(scores, scored))
    return {"judged": len(scored), "judge_mean": sum(scores) / len(scored), "judge_agreement": agree / len(scored)}


def mean_score(rows: list[AttemptResult]) -> float | None:
    """Mean check score over `rows`, an attempt without a score counting 0 and an errored one 0
    whatever its grader reported (the errors rule); None when none has a score."""
    if not rows or all(r.score is None for r in rows):
        return None
    return sum(0.0 if r.is_error else (r.score or 0.0) for r in rows) / len(rows)


def group_score(rows: list[AttemptResult], ks: list[int]) -> RepoScore:
    """The score of one group value; pass@k / pass^k for `ks` ([] with one attempt)."""
    resolved = sum(r.resolved for r in rows)
    stepped = [r.steps for r in rows if r.steps is not None]
    spent = [(r.tokens_in or 0) + (r.tokens_out or 0) for r in rows if r.tokens_in is not None]
    score = RepoScore(total=len(rows), resolved=resolved, errors=sum(r.is_error for r in rows),
                      resolved_rate=resolved / len(rows) if rows else 0.0, mean_score=mean_score(rows),
                      mean_steps=round(sum(stepped) / len(stepped), 2) if stepped else None,
                      mean_tokens=round(sum(spent) / len(spent), 1) if spent else None)
    if ks:
        score.pass_at_k, score.pass_hat_k = pass_rates(per_instance(rows), ks)
    return score


def compute_scorecard(results: Iterable[AttemptResult | dict[str, Any]], *, suite: str, source: str,
                      reproducibility: Reproducibility, expected: int | None = None,
                      started_at: float = 0.0, finished_at: float | None = None,
                      model_ran: bool = False, family: str | None = None,
                      categories: dict[str, CategoryInfo] | None = None, benchmark: str | None = None) -> Scorecard:
    """The scorecard of a run's results. `expected`: instance attempts selected (for `missing`);
    `categories`: the family's own (the core ones are always there); `benchmark`: the benchmark
    whose own verdict the family reports (its attempts' `tests.benchmark_passed`)."""
    rows = latest_results(results)
    finished_at = finished_at if finished_at is not None else time.time()
    total = len(rows)
    resolved = sum(r.resolved for r in rows)
    errors = sum(r.is_error for r in rows)
    graded = total - errors
    declared = {k: v for k, v in (categories or {}).items() if k not in CORE_CATEGORIES}
    for r in rows:  # a category nobody declared still shows, as itself
        declared.setdefault(r.category, category_info(r.category))
    known = ordered_categories(declared)
    by_category = {c: 0 for c in known}
    repos: dict[str, list[AttemptResult]] = {}
    groups: dict[str, dict[str, list[AttemptResult]]] = {}
    for r in rows:
        by_category[r.category] += 1
        repos.setdefault(r.repo or "(none)", []).append(r)
        for name, value in r.groups.items():
            groups.setdefault(name, {}).setdefault(value or "(none)", []).append(r)

    counts = per_instance(rows)
    attempts = max((n for n, _ in counts.values()), default=0)
    ks = list(range(1, min(n for n, _ in counts.values()) + 1)) if attempts > 1 else []
    pak = phk = None
    if ks:
        pak, phk = pass_rates(counts, ks)
    graded_rows = [r for r in rows if not r.is_error]
    by_check, by_check_kind = score_checks(rows)

    tokens = cost = None
    cost_known = False
    if model_ran:
        tokens = Tokens(input=sum(r.tokens_in or 0 for r in rows),
                        output=sum(r.tokens_out or 0 for r in rows))
        costs = [r.cost_usd for r in rows if not r.is_error]
        cost_known = bool(costs) and all(c is not None for c in costs)
        cost = sum(costs) if cost_known else None  # type: ignore[arg-type]

    missing = max(0, (expected or 0) - total)
    return Scorecard(
        suite=suite, source=source, instances=len(counts), attempts=attempts, total=total,
        resolved=resolved, errors=errors,
        instances_with_errors=len({r.instance_id for r in rows if r.is_error}),
        graded=graded, resolved_rate=resolved / total if total else 0.0,
        resolved_rate_graded=resolved / graded if graded else None, family=family, categories=known,
        by_category=by_category, by_repo={k: group_score(v, ks) for k, v in sorted(repos.items())},
        by_group={name: {k: group_score(v, ks) for k, v in sorted(values.items())}
                  for name, values in sorted(groups.items())},
        pass_at_k=pak, pass_hat_k=phk,
        mean_score=mean_score(rows), mean_score_graded=mean_score(graded_rows) if graded_rows else None,
        by_check=by_check, by_check_kind=by_check_kind, benchmark=benchmark_score(rows, ks, benchmark), **judge_summary(rows),
        tokens=tokens, cost_usd=cost, cost_known=cost_known, missing=missing, complete=missing == 0,
        wall_seconds=max(0.0, finished_at - started_at) if started_at else 0.0,
        started_at=started_at, finished_at=finished_at, reproducibility=reproducibility)
