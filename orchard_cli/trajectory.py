"""The trajectory record: one agent episode on one task, as `orchard distill` and `orchard eval`
write it (one JSON object per line, append-only; see `orchard_cli.records`).

An episode's identity is (suite, task_id, harness, model, attempt): `episode_key` hashes it, so
resuming skips finished episodes across teachers. `calls` are the recording proxy's records, as
the harness's own model traffic went by; `messages` / `tools` are the normalised conversation (OpenAI
chat messages with `tool_calls`, tool schemas in chat form) that training reads. Runs of
`orchard eval --predictions` write the same record with no calls (`source: "predictions"`), so
graded patches are experience too.

This module is a leaf of the core: it never imports tasks or harnesses.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.proxy.records import CallRecord

SCHEMA_VERSION = 1

OutcomeCategory = Literal["resolved", "unresolved", "empty_patch", "patch_apply_failed", "timeout",
                          "env_error", "infra_error"]


def episode_key(suite: str, task_id: str, harness: str, model: str, attempt: int) -> str:
    """Stable id of an episode: the same task, harness, model and attempt give the same id."""
    raw = "\x1f".join([suite, task_id, harness, model, str(attempt)])
    return "ep-" + hashlib.sha256(raw.encode()).hexdigest()[:16]


class TrajectoryOutcome(BaseModel):
    """The grader's verdict on the episode's final patch."""

    model_config = ConfigDict(extra="forbid")

    resolved: bool
    category: OutcomeCategory
    reward: float = 0.0
    details: dict[str, Any] = Field(default_factory=dict)
    """Grader details: test counts, FAIL_TO_PASS / PASS_TO_PASS results, the error if any."""


class Trajectory(BaseModel):
    """One episode. Documented field by field; `schema_version` changes with any breaking edit."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    episode_id: str
    """`episode_key(suite, task_id, harness, model, attempt)`."""
    task_id: str
    suite: str
    family: str = "swe"
    source: Literal["agent", "predictions"] = "agent"
    """'agent' when a harness ran a model; 'predictions' for graded patches from `eval`."""
    harness: str
    """Harness name (bash, codex, openclaw, zeroclaw), or 'predictions' / 'gold' / 'empty'."""
    harness_version: str | None = None
    model: str
    """The model (teacher) name as sent to the endpoint; never a key or an authenticated URL."""
    attempt: int = 0
    problem_statement: str = ""
    calls: list[CallRecord] = Field(default_factory=list)
    """Every model call the harness made, as the recording proxy saw it, in order."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """The normalised conversation: OpenAI chat messages (system, user, assistant with
    `tool_calls`, tool) of the episode's last call plus the final answer."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """Tool schemas in OpenAI chat form ({"type": "function", "function": {...}})."""
    outcome: TrajectoryOutcome
    patch: str = ""
    """The final diff of the workspace, as graded."""
    started_at: float = Field(default_factory=time.time)
    duration_seconds: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    """None when the model's price is unknown (never 0 for unknown)."""
    harness_exit_code: int | None = None
    errors: list[str] = Field(default_factory=list)
    """What went wrong along the way (harness crash, capped episode, upstream failures)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form: repo, dataset sha256, orchard version, seed."""
