"""Per-check verdicts: what a check-graded family (claw) reports per attempt, and the scorecard's
`by_check` / `by_check_kind` tables built from them.

A family graded by checks returns in `Outcome.tests`:

    checks       {check id: passed}, in task order
    check_kinds  {check id: kind}       (claw: state | safety | dispatch | answer | command)
    score        the share of checks passed (passed / total)

`check_fields` lifts them into the typed fields of the results record (`AttemptResult.checks`,
`.check_kinds`, `.score`): ids and kinds are short strings, verdicts booleans, so results.jsonl
stays small; the rest of the grader's output goes to the logs as before.

The tables follow the scorecard's errors rule. A task's checks are the ids any of its attempts
reported; each attempt of that task is one trial of each of them. `pass_rate` is over ALL those
attempts (an attempt that ended before its checks ran, or in an env/infra error even where its
grader reported checks, counts as not passed), `pass_rate_graded` over the graded attempts whose
grader reported the check.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

MAX_ID_CHARS = 200
"""Longer check ids or kinds are not kept in results.jsonl (claw's ids are at most 64)."""


class CheckScore(BaseModel):
    """How often a check (or every check of a kind) passed."""

    model_config = ConfigDict(extra="forbid")

    task_id: str | None = None
    """The task the check belongs to; None in `by_check_kind`."""
    check: str | None = None
    """The check's id within its task; None in `by_check_kind`."""
    kind: str | None = None
    """The check's kind (state, safety, ...); None when the family did not say."""
    total: int = 0
    """Trials: attempts of the task (summed over the kind's checks in `by_check_kind`), errors included."""
    graded: int = 0
    """Trials whose grader reported this check."""
    passed: int = 0
    pass_rate: float = 0.0
    """passed / total: errors and attempts that never reached the check count as not passed."""
    pass_rate_graded: float | None = None
    """passed / graded; None when the check was never reported."""


class _Row(Protocol):
    instance_id: str
    checks: dict[str, bool]
    check_kinds: dict[str, str]

    @property
    def is_error(self) -> bool: ...


def check_fields(tests: dict[str, Any]) -> dict[str, Any]:
    """The `checks`, `check_kinds` and `score` of a results record, from an Outcome's `tests`
    ({} keys when the family reports none). `score` is the family's, else passed / total of checks."""
    raw = tests.get("checks")
    checks = ({k: v for k, v in raw.items() if isinstance(k, str) and len(k) <= MAX_ID_CHARS
               and isinstance(v, bool)} if isinstance(raw, dict) else {})
    raw_kinds = tests.get("check_kinds")
    kinds = ({k: v for k, v in raw_kinds.items() if k in checks and isinstance(v, str) and len(v) <= MAX_ID_CHARS}
             if isinstance(raw_kinds, dict) else {})
    score = tests.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        score = sum(checks.values()) / len(checks) if checks else None
    return {"checks": checks, "check_kinds": kinds, "score": None if score is None else float(score)}


def _rate(s: CheckScore) -> CheckScore:
    s.pass_rate = s.passed / s.total if s.total else 0.0
    s.pass_rate_graded = s.passed / s.graded if s.graded else None
    return s


def score_checks(rows: Iterable[_Row]) -> tuple[dict[str, CheckScore], dict[str, CheckScore]]:
    """(by_check, by_check_kind) over the latest result of each attempt. by_check is keyed
    '<task id>/<check id>' (check ids hold no '/'), tasks sorted, checks in task order; by_check_kind
    by kind, sorted ('(none)' for checks whose kind nobody reported). Both are empty when no
    attempt reported checks (SWE, and results written before checks were recorded)."""
    attempts: dict[str, list[_Row]] = {}
    for r in rows:
        attempts.setdefault(r.instance_id, []).append(r)
    by_check: dict[str, CheckScore] = {}
    for task_id in sorted(attempts):
        task_rows = attempts[task_id]
        ids: dict[str, str | None] = {}
        for r in task_rows:  # the union of the ids its attempts reported, in task order
            for check in r.checks:
                ids.setdefault(check, None)
            for check, kind in r.check_kinds.items():
                if check in ids:
                    ids[check] = kind
        for check, kind in ids.items():
            score = CheckScore(task_id=task_id, check=check, kind=kind, total=len(task_rows))
            for r in task_rows:  # an errored attempt's checks are not a verdict (the errors rule)
                if check in r.checks and not r.is_error:
                    score.graded += 1
                    score.passed += int(r.checks[check])
            by_check[f"{task_id}/{check}"] = _rate(score)
    by_kind: dict[str, CheckScore] = {}
    for s in by_check.values():
        kind = s.kind or "(none)"
        agg = by_kind.setdefault(kind, CheckScore(kind=s.kind))
        agg.total += s.total
        agg.graded += s.graded
        agg.passed += s.passed
    return by_check, {k: _rate(by_kind[k]) for k in sorted(by_kind)}
