"""Scorecard math: pass@k / pass^k against hand-computed values, errors counted apart, cost."""

from __future__ import annotations

import pytest

from orchard_cli import outcome, trajectory
from orchard_cli.scoring import (
    ERROR_CATEGORIES,
    AttemptResult,
    Reproducibility,
    compute_scorecard,
    pass_at_k,
    pass_hat_k,
)
from orchard_cli.tasks import base as task_base

REPRO = Reproducibility(orchard_version="0.1.0", seed=7, dataset_sha256="ab" * 32)


def _r(iid, attempt=1, category="unresolved", repo="o/r", **kw):
    return AttemptResult(instance_id=iid, attempt=attempt, repo=repo, category=category,
                         resolved=category == "resolved", **kw)


def test_categories_have_one_owner():
    """The seam, the records and the scorecard share one category list (orchard_cli.outcome);
    a family's own categories come on top, in display order, and a SWE scorecard keeps all ten."""
    assert task_base.ERROR_CATEGORIES is ERROR_CATEGORIES is outcome.ERROR_CATEGORIES
    assert task_base.CORE_CATEGORIES is outcome.CORE_CATEGORIES
    assert not hasattr(trajectory, "OutcomeCategory")  # no second list in the records
    from orchard_cli.tasks.swe.family import SWEFamily

    ordered = list(task_base.family_categories(SWEFamily()))
    assert ordered == ["resolved", "unresolved", "empty_patch", "patch_apply_failed", "missing_dependency",
                       "needs_network", "timeout", "needs_image", "env_error", "infra_error"]
    card = compute_scorecard([_r("a", category="empty_patch")], suite="s", source="gold", reproducibility=REPRO,
                             categories=task_base.family_categories(SWEFamily()))
    assert list(card.by_category) == ordered and card.by_category["empty_patch"] == 1
    odd = compute_scorecard([_r("a", category="wrong_recipient")], suite="s", source="x", reproducibility=REPRO)
    assert odd.by_category["wrong_recipient"] == 1 and odd.categories["wrong_recipient"].label == "wrong recipient"


def test_pass_at_k_and_pass_hat_k_by_hand():
    # n=5 attempts, c=2 resolved: pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass^2 = C(2,2)/C(5,2) = 1/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4) == pass_hat_k(5, 2, 1)
    assert pass_at_k(5, 2, 4) == 1.0  # n - c = 3 < k: some draw of 4 must hold a success
    assert pass_hat_k(5, 2, 3) == 0.0
    assert pass_at_k(3, 0, 3) == 0.0 and pass_hat_k(3, 3, 3) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_scorecard_pass_at_k_averages_over_tasks():
    # task a: 1 of 3 resolved; task b: 3 of 3.
    rows = [_r("a", 1, "resolved"), _r("a", 2), _r("a", 3, "empty_patch"),
            *(_r("b", k, "resolved", repo="o/s") for k in (1, 2, 3))]
    card = compute_scorecard(rows, suite="s", source="gold", reproducibility=REPRO, expected=6)
    assert card.instances == 2 and card.attempts == 3 and card.total == 6 and card.resolved == 4
    assert card.resolved_rate == pytest.approx(4 / 6)
    # pass@1 = mean(1/3, 1) = 2/3; pass@2: a = 1 - C(2,2)/C(3,2) = 2/3, b = 1 -> 5/6; pass@3 = 1
    assert card.pass_at_k == pytest.approx({1: 2 / 3, 2: 5 / 6, 3: 1.0})
    # pass^1 = 2/3; pass^2: a = C(1,2)/C(3,2) = 0, b = 1 -> 1/2; pass^3 -> 1/2
    assert card.pass_hat_k == pytest.approx({1: 2 / 3, 2: 0.5, 3: 0.5})
    assert card.by_repo["o/r"].resolved == 1 and card.by_repo["o/s"].resolved_rate == 1.0
    assert card.complete and card.missing == 0


def test_one_attempt_has_no_pass_at_k():
    card = compute_scorecard([_r("a", 1, "resolved")], suite="s", source="gold", reproducibility=REPRO)
    assert card.pass_at_k is None and card.pass_hat_k is None and card.resolved_rate == 1.0


def test_errors_are_counted_apart_never_as_unresolved():
    rows = [_r("a", category="resolved"), _r("b", category="resolved"), _r("c"),
            _r("d", category="env_error", error="no interpreter"),
            _r("e", category="infra_error", error="sandbox died")]
    card = compute_scorecard(rows, suite="s", source="gold", reproducibility=REPRO, expected=6)
    assert card.total == 5 and card.errors == 2 and card.graded == 3
    assert card.by_category["unresolved"] == 1
    assert card.by_category["env_error"] == 1 and card.by_category["infra_error"] == 1
    assert card.resolved_rate == pytest.approx(2 / 5)          # headline: over all
    assert card.resolved_rate_graded == pytest.approx(2 / 3)   # over graded only
    assert card.instances_with_errors == 2 and card.by_repo["o/r"].errors == 2
    assert card.missing == 1 and not card.complete


def test_the_last_record_of_an_attempt_wins():
    rows = [_r("a", category="infra_error", error="boom"), _r("a", category="resolved")]
    card = compute_scorecard(rows, suite="s", source="gold", reproducibility=REPRO)
    assert card.total == 1 and card.errors == 0 and card.resolved == 1


def test_cost_is_unknown_not_zero_when_a_price_is_missing():
    priced = [_r("a", tokens_in=100, tokens_out=10, cost_usd=0.25), _r("b", tokens_in=5, cost_usd=0.5)]
    card = compute_scorecard(priced, suite="s", source="model:x@h", reproducibility=REPRO, model_ran=True)
    assert card.cost_usd == pytest.approx(0.75) and card.cost_known
    assert card.tokens.input == 105 and card.tokens.output == 10
    unpriced = [_r("a", tokens_in=100, cost_usd=0.25), _r("b", tokens_in=5, cost_usd=None)]
    card = compute_scorecard(unpriced, suite="s", source="model:x@h", reproducibility=REPRO, model_ran=True)
    assert card.cost_usd is None and not card.cost_known
    none_ran = compute_scorecard(priced, suite="s", source="gold", reproducibility=REPRO)
    assert none_ran.tokens is None and none_ran.cost_usd is None
    assert "null" in none_ran.model_dump_json() and '"cost_usd":0' not in card.model_dump_json()


def test_empty_results_make_an_empty_scorecard():
    card = compute_scorecard([], suite="s", source="gold", reproducibility=REPRO, expected=2)
    assert card.total == 0 and card.resolved_rate == 0.0 and card.resolved_rate_graded is None
    assert card.missing == 2


def test_a_run_without_a_seed_says_so_in_both_reports():
    from orchard_cli.scoring.report import render_html, render_markdown

    card = compute_scorecard([_r("a")], suite="s", source="gold", reproducibility=Reproducibility(orchard_version="0.1.0"))
    assert "<tr><th>seed</th><td><code>-</code></td></tr>" in render_html(card)  # was Python's 'None'
    assert "- seed: -" in render_markdown(card)
