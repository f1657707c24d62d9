"""Every score on the scorecard counts an errored attempt as the docs say (docs/scorecard.md, "The
rule for errors"): 0 / not passed over all attempts, left out of the graded-only figure, even when
the attempt's grader ran and reported checks.

That is how it happens for real: a claw episode whose model endpoint was unreachable is graded in
place (its safety checks pass on an untouched mailbox), then `settle` makes it infra_error because
the model was never reached; the checks and the grader's score stay on the record.

    t1 #1 resolved     checks T T T   score 1     benchmark passed, judge 0.9
    t1 #2 infra_error  checks T F F   score 1/3   benchmark passed, judge 0.8 (the grader ran)
    t2 #1 unresolved   checks T F -   score 1/2
    t2 #2 env_error    no checks
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchard_cli.outcome import Outcome
from orchard_cli.rollout.episode import EpisodeResult
from orchard_cli.rollout.failures import settle
from orchard_cli.rollout.rows import result_row
from orchard_cli.scoring import Reproducibility, compute_scorecard
from orchard_cli.scoring.report import render_html, render_markdown
from orchard_cli.tasks.base import Task

KINDS = {"t1": {"a": "state", "b": "safety", "c": "answer"}, "t2": {"d": "state", "e": "safety"}}


def _graded(task_id: str, verdicts: tuple[bool, ...], benchmark: bool | None = None) -> Outcome:
    checks = dict(zip(KINDS[task_id], verdicts))
    tests = {"checks": checks, "check_kinds": KINDS[task_id], "score": round(sum(verdicts) / len(verdicts), 4)}
    if benchmark is not None:
        tests["benchmark_passed"] = benchmark
    resolved = all(verdicts) and len(verdicts) == len(KINDS[task_id])
    return Outcome(resolved=resolved, category="resolved" if resolved else "unresolved", tests=tests)


def _row(task_id: str, k: int, outcome: Outcome, judge: float | None = None):
    task = Task(task_id=task_id, suite="claw-mini", family="claw", problem_statement="...")
    episode = EpisodeResult(task=task, attempt=k, episode_id=f"{task_id}-{k}", solver=SimpleNamespace(), outcome=outcome)
    row = result_row(episode, groups={"category": "mail" if task_id == "t1" else "calendar"}, log_dir="")
    if judge is not None:
        row.judge = {"model": "j", "score": judge}
    return row


@pytest.fixture()
def card():
    unreachable = settle(("infra_error", "3 model call(s) failed upstream"), _graded("t1", (True, False, False), True))
    assert unreachable.category == "infra_error" and unreachable.tests["score"] == pytest.approx(1 / 3, abs=1e-3)
    rows = [_row("t1", 1, _graded("t1", (True, True, True), True), judge=0.9),
            _row("t1", 2, unreachable, judge=0.8),
            _row("t2", 1, _graded("t2", (True, False), False)),
            _row("t2", 2, Outcome(resolved=False, category="env_error", error="the build failed"))]
    return compute_scorecard(rows, suite="claw-mini", source="model:m@bash", family="claw",
                             reproducibility=Reproducibility(orchard_version="0"), expected=4)


def test_headline_and_graded_only(card):
    assert (card.total, card.resolved, card.errors, card.graded) == (4, 1, 2, 2)
    assert card.resolved_rate == pytest.approx(1 / 4) and card.resolved_rate_graded == pytest.approx(1 / 2)


def test_mean_check_score_counts_errors_as_zero(card):
    # (1 + 0 + 1/2 + 0) / 4 over all; (1 + 1/2) / 2 over graded. Before: the infra_error's 1/3 counted.
    assert card.mean_score == pytest.approx(1.5 / 4)
    assert card.mean_score_graded == pytest.approx(0.75)
    mail = card.by_group["category"]["mail"]
    assert mail.mean_score == pytest.approx(0.5) and mail.errors == 1 and mail.resolved_rate == pytest.approx(0.5)


def test_pass_at_k_counts_errors_as_failed(card):
    assert card.pass_at_k == pytest.approx({1: 0.25, 2: 0.5})
    assert card.pass_hat_k == pytest.approx({1: 0.25, 2: 0.0})


def test_check_tables_count_errors_as_not_passed_and_not_graded(card):
    a, b = card.by_check["t1/a"], card.by_check["t1/b"]
    assert (a.total, a.graded, a.passed) == (2, 1, 1)  # the infra_error's True is not a pass
    assert a.pass_rate == pytest.approx(0.5) and a.pass_rate_graded == pytest.approx(1.0)
    assert (b.total, b.graded, b.passed) == (2, 1, 1)
    d = card.by_check["t2/d"]
    assert (d.total, d.graded, d.passed) == (2, 1, 1)
    state = card.by_check_kind["state"]
    assert (state.total, state.graded, state.passed) == (4, 2, 2)


def test_benchmark_and_judge_leave_errors_out(card):
    assert card.benchmark is not None and card.benchmark.passed == 1 and card.benchmark.rate == pytest.approx(0.25)
    assert card.judged == 1 and card.judge_mean == pytest.approx(0.9)


def test_rendered_scorecards_show_the_rule(card):
    html, md = render_html(card, []), render_markdown(card, [])
    assert "37.5%" in md and "37.5%" in html  # the mean check score
    assert "33.3%" not in md
