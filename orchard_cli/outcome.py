"""Verdicts: the one list of outcome categories, and the `Outcome` a family's grader returns.

The core categories are the same for every family:

    resolved      the task was done (every required check passed)
    unresolved    graded, not done
    timeout       the agent ran out of time (not the model's verdict on the task)
    env_error     the task's environment could not be had (a build, a service that will not start)
    infra_error   the sandbox, the backend or the model endpoint failed

The requirement categories are the core's too: an episode that cannot run as the run was asked
ends before its sandbox as one of them (`orchard_cli.family.Requirements`), and a family's grader
may return one (SWE: tests that need the internet are `needs_network`):

    needs_network  it reaches the live web; runs with --network full
    needs_judge    its grader calls an LLM judge; runs with --judge-model
    needs_user     a multi-turn task; runs with a simulated user (--user-model)
    needs_data     files it needs are missing

A family adds its own (SWE: `empty_patch`, `patch_apply_failed`) by declaring them on its class
(`TaskFamily.categories`); each category has a label and a colour, used by the scorecard, the
HTML pages and `orchard view`. Errors (env_error, infra_error) are counted apart everywhere and
never read as 'unresolved'.

This module is a leaf of the core: records, scoring and the rollout core import it; it imports
nothing of orchard's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class CategoryInfo(BaseModel):
    """How a category is shown to people."""

    model_config = ConfigDict(extra="forbid")

    label: str
    """Words for a person ('patch did not apply')."""
    color: str
    """A CSS colour for badges and bars."""


CORE_CATEGORIES: dict[str, CategoryInfo] = {
    "resolved": CategoryInfo(label="resolved", color="#2f9e62"),
    "unresolved": CategoryInfo(label="unresolved", color="#8b95a7"),
    "timeout": CategoryInfo(label="timeout", color="#9b6fd0"),
    "needs_image": CategoryInfo(label="needs an image the engine lacks", color="#7a8fb8"),
    "env_error": CategoryInfo(label="environment error", color="#e25c5c"),
    "infra_error": CategoryInfo(label="infrastructure error", color="#a7333a"),
}
ERROR_CATEGORIES = frozenset({"env_error", "infra_error"})
REQUIREMENT_CATEGORIES: dict[str, CategoryInfo] = {
    "needs_network": CategoryInfo(label="needs the network (--network full)", color="#a4c4e0"),
    "needs_judge": CategoryInfo(label="needs a judge (--judge-model)", color="#c7a4e0"),
    "needs_user": CategoryInfo(label="needs a simulated user (--user-model)", color="#e0cfa4"),
    "needs_data": CategoryInfo(label="task data missing", color="#b0b0b0"),
}
"""Shown by a scorecard only where a run has them (every family may end an episode so)."""
UNKNOWN_COLOR = "#57606a"


def ordered_categories(extra: dict[str, CategoryInfo] | None = None) -> dict[str, CategoryInfo]:
    """Every category of a family, in display order: resolved, unresolved, the family's own,
    then timeout and the errors."""
    core = list(CORE_CATEGORIES.items())
    merged = dict(core[:2])
    merged.update({k: v for k, v in (extra or {}).items() if k not in CORE_CATEGORIES})
    merged.update(core[2:])
    return merged


def category_info(name: str, known: dict[str, CategoryInfo] | None = None) -> CategoryInfo:
    """The label and colour of a category (a name nobody declared shows as itself, in grey)."""
    table = known or CORE_CATEGORIES
    return (table.get(name) or CORE_CATEGORIES.get(name) or REQUIREMENT_CATEGORIES.get(name)
            or CategoryInfo(label=name.replace("_", " "), color=UNKNOWN_COLOR))


class EpisodeFailure(Exception):
    """An episode that ended before (or instead of) grading: its category and the cause. Raised
    by the core's phases (`orchard_cli.rollout.failures`) and by a family that finds its episode
    cannot run (a requirement it could only see late)."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category

    def outcome(self) -> "Outcome":
        return Outcome(resolved=False, category=self.category, error=str(self))


class Outcome(BaseModel):
    """A graded episode: what the family's `grade` returns."""

    model_config = ConfigDict(extra="forbid")

    resolved: bool
    category: str
    """A core category or one the family declares."""
    reward: float = 0.0
    tests: dict[str, Any] = Field(default_factory=dict)
    """What the grader counted: test results (SWE: FAIL_TO_PASS / PASS_TO_PASS success and
    failure), check results; numbers and short strings go to results.jsonl, the rest to logs."""
    error: str | None = None
    """For env_error / infra_error / timeout: the cause in one line."""
    log: str = ""
    """The output the verdict was read from (test output)."""

    @property
    def is_error(self) -> bool:
        return self.category in ERROR_CATEGORIES
