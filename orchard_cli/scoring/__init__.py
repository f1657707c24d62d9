"""Scorecards: computed from a run's results, written as JSON, Markdown and a self-contained HTML
page, and compared run against run. Nothing here imports tasks or harnesses."""

from orchard_cli.scoring.scorecard import (
    CATEGORIES,
    ERROR_CATEGORIES,
    AttemptResult,
    Reproducibility,
    Scorecard,
    compute_scorecard,
    latest_results,
    pass_at_k,
    pass_hat_k,
)

__all__ = ["CATEGORIES", "ERROR_CATEGORIES", "AttemptResult", "Reproducibility", "Scorecard",
           "compute_scorecard", "latest_results", "pass_at_k", "pass_hat_k"]
