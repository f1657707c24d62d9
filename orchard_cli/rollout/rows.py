"""An episode's records: the trajectory (for distill and eval's agent runs) and the result row
(results.jsonl), each built from an `EpisodeResult` in one place."""

from __future__ import annotations

import re
import time
from typing import Any

from orchard_cli import __version__
from orchard_cli.conversation import conversation
from orchard_cli.evidence import SCREENSHOT
from orchard_cli.outcome import ERROR_CATEGORIES
from orchard_cli.rollout.episode import EpisodeResult
from orchard_cli.scoring.checks import check_fields
from orchard_cli.scoring.scorecard import AttemptResult
from orchard_cli.tasks.content import CONTENT_KEY, content_key
from orchard_cli.trajectory import Trajectory, TrajectoryOutcome


def trajectory_of(result: EpisodeResult, metadata: dict[str, Any] | None = None) -> Trajectory:
    """The trajectory of an episode: the model calls as recorded, the conversation, the evidence
    and the verdict."""
    task, outcome, solution, solver = result.task, result.outcome, result.solution, result.solver
    agent = solution.agent if solution is not None else None
    records = agent.records if agent is not None else []
    messages, tools = conversation(records)
    tokens_in, tokens_out = agent.tokens if agent is not None else (0, 0)
    details: dict[str, Any] = dict(outcome.tests)
    if outcome.error:
        details["error"] = outcome.error
    meta: dict[str, Any] = {"repo": task.repo, "orchard_version": __version__, CONTENT_KEY: content_key(task),
                            **(metadata or {})}
    if agent is not None:
        meta["harness_run"] = agent.run.model_dump(exclude={"stdout_tail", "stderr_tail"})
        if agent.summary is not None:
            meta["proxy"] = agent.summary.model_dump(exclude={"schema_version"})
    errors = list(agent.errors if agent is not None else [])
    failure = solution.failure if solution is not None else None
    said = failure is not None and outcome.error == failure[1]  # the agent's errors say it already
    if outcome.category in ERROR_CATEGORIES and outcome.error and not said and outcome.error not in errors:
        errors.append(outcome.error)
    evidence = result.evidence
    return Trajectory(
        episode_id=result.episode_id, task_id=task.task_id, suite=task.suite, family=task.family,
        source="agent" if solver.model_ran else "predictions", harness=solver.harness,
        harness_version=solver.version, model=solver.model, attempt=result.attempt,
        problem_statement=task.problem_statement, calls=records, messages=messages, tools=tools,
        outcome=TrajectoryOutcome(resolved=outcome.resolved, category=outcome.category,
                                  reward=outcome.reward, details=details),
        patch=(evidence.patch or "") if evidence is not None else "", evidence=evidence,
        started_at=result.started_at, duration_seconds=result.duration_seconds,
        tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=solution.cost_usd if solution else None,
        harness_exit_code=agent.run.exit_code if agent is not None else None, errors=errors, metadata=meta)


def counts(tests: dict[str, Any]) -> dict[str, Any]:
    """The counts of an Outcome's `tests` (numbers and short strings); per-test detail goes to logs.
    Per-check verdicts have fields of their own in the record (`check_fields`)."""
    out: dict[str, Any] = {}
    for key, value in tests.items():
        if key in ("checks", "check_kinds"):
            continue
        if isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 200):
            out[key] = value
        elif isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values()):
            out[key] = value
    return out


def result_row(result: EpisodeResult, *, groups: dict[str, str], log_dir: str,
               trajectory: str | None = None) -> AttemptResult:
    """The results.jsonl line of an episode."""
    outcome, solution, evidence = result.outcome, result.solution, result.evidence
    patch = (evidence.patch or "") if evidence is not None else ""
    return AttemptResult(
        instance_id=result.task.task_id, attempt=result.attempt, episode_id=result.episode_id,
        repo=result.task.repo, groups=groups, resolved=outcome.resolved, category=outcome.category,
        tests=counts(outcome.tests), **check_fields(outcome.tests), duration_seconds=round(result.duration_seconds, 3),
        patch_bytes=len(patch.encode()), patch_files=len(re.findall(r"^diff --git ", patch, re.MULTILINE)),
        log_dir=log_dir, error=outcome.error, model=solution.model if solution else None,
        tokens_in=solution.tokens_in if solution else None, tokens_out=solution.tokens_out if solution else None,
        cost_usd=solution.cost_usd if solution else None, trajectory=trajectory,
        steps=len(evidence.dispatches) if evidence is not None and evidence.dispatches else None,
        screenshot=f"{log_dir}/{SCREENSHOT}" if evidence is not None and SCREENSHOT in evidence.attachments else None,
        started_at=result.started_at, finished_at=time.time())
