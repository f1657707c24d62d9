"""The scorecard's tables as plain rows of text, rendered the same way by Markdown and HTML
(`report.py`): per group value with pass@k / pass^k, per check kind, per check of each task."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from orchard_cli.scoring.scorecard import RepoScore, Scorecard

GROUP_TITLES = {"repo": "repository"}


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str
    ident: str
    """A stable id (the HTML section's), e.g. 'by-category', 'by-check-kind'."""
    headers: list[str]
    numeric: list[bool]
    """Which columns are right-aligned numbers."""
    rows: list[list[str]]
    note: str = ""


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def shown_ks(card: Scorecard) -> list[int]:
    """The k of the per-group pass@k / pass^k columns: every k > 1 (pass@1 = pass^1 is the mean
    per-task rate), thinned to three (2, the middle one, the largest) past three; the JSON has all."""
    ks = [k for k in (card.pass_at_k or {}) if k > 1]
    return ks if len(ks) <= 3 else [ks[0], ks[len(ks) // 2], ks[-1]]


def _mean(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def group_tables(card: Scorecard) -> list[Table]:
    """One table per grouping (by_group; by_repo for scorecards from before groupings)."""
    groups: dict[str, dict[str, RepoScore]] = card.by_group or (
        {} if set(card.by_repo) <= {"(none)"} else {"repo": card.by_repo})  # no groupings: the headline says it all
    ks = shown_ks(card)
    tables = []
    for name, scores in groups.items():
        title = GROUP_TITLES.get(name, name)
        scored = any(s.mean_score is not None for s in scores.values())
        stepped = any(s.mean_steps is not None for s in scores.values())
        spent = any(s.mean_tokens is not None for s in scores.values())
        headers = [title, "resolved", "total", "errors", "rate"] + (["check score"] if scored else [])
        headers += [f"pass@{k}" for k in ks] + [f"pass^{k}" for k in ks]
        headers += (["steps"] if stepped else []) + (["tokens"] if spent else [])
        rows = []
        for key, s in scores.items():
            row = [key, str(s.resolved), str(s.total), str(s.errors), pct(s.resolved_rate)]
            row += [pct(s.mean_score)] if scored else []
            row += [pct((s.pass_at_k or {}).get(k)) for k in ks] + [pct((s.pass_hat_k or {}).get(k)) for k in ks]
            row += [_mean(s.mean_steps)] if stepped else []
            row += [_mean(s.mean_tokens, 0)] if spent else []
            rows.append(row)
        note = ("rate: resolved ÷ all attempts (errors count as not resolved)"
                + ("; check score: mean share of checks passed, errors as 0" if scored else "")
                + ("; pass@k / pass^k: unbiased estimators averaged over the group's tasks" if ks else "")
                + ("; steps: mean tool calls of the attempts that made any" if stepped else "")
                + ("; tokens: mean model tokens (in + out) per attempt" if spent else ""))
        tables.append(Table(title=f"By {title}", ident=f"by-{name}", headers=headers,
                            numeric=[False] + [True] * (len(headers) - 1), rows=rows, note=note))
    return tables


def check_tables(card: Scorecard) -> list[Table]:
    """Per check kind, and per check of each task; none when no attempt reported checks."""
    if not card.by_check:
        return []
    kinds = Table(
        title="Checks by kind", ident="by-check-kind",
        headers=["kind", "passed", "trials", "graded", "pass rate", "graded only"],
        numeric=[False, True, True, True, True, True],
        rows=[[kind, str(s.passed), str(s.total), str(s.graded), pct(s.pass_rate), pct(s.pass_rate_graded)]
              for kind, s in card.by_check_kind.items()],
        note="trials: each check of each task, once per attempt; pass rate over all of them "
             "(an attempt that ended in an error counts as not passed), graded only beside it")
    checks = Table(
        title="Checks", ident="by-check",
        headers=["task", "check", "kind", "passed", "attempts", "pass rate", "graded only"],
        numeric=[False, False, False, True, True, True, True],
        rows=[[s.task_id or "", s.check or "", s.kind or "-", str(s.passed), str(s.total), pct(s.pass_rate),
               pct(s.pass_rate_graded)] for s in card.by_check.values()])
    return [kinds, checks]
