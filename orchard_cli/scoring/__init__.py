"""Scorecards: computed from a run's results, written as JSON, Markdown and a self-contained HTML
page, and compared run against run. Nothing here imports tasks or harnesses."""

from orchard_cli.outcome import ERROR_CATEGORIES
from orchard_cli.scoring.checks import CheckScore
from orchard_cli.scoring.scorecard import (
    AttemptResult,
    Reproducibility,
    Scorecard,
    compute_scorecard,
    latest_results,
    pass_at_k,
    pass_hat_k,
)

__all__ = ["ERROR_CATEGORIES", "AttemptResult", "CheckScore", "Reproducibility", "Scorecard",
           "compute_scorecard", "latest_results", "pass_at_k", "pass_hat_k"]
