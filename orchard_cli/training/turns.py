"""Trajectory files -> the episodes to train on -> their turns.

A turn is one answer a model gave and the prompt it answered: the recorded call's request (chat, or
a Responses request translated to chat with `orchard_cli.proxy.translate`, which is what a chat
upstream was sent) and its answer, plus the token ids when the upstream returned them. Calls that
failed (an error, a non-200 status, no answer) are not turns. An episode recorded without calls
(a hand-made or exported conversation) gives one turn per assistant message of `messages`.

Filters run in this order and each drop is counted under its reason: not resolved (unless
`only_resolved` is off), suite, harness, teacher (the trajectory's `model`); then episodes whose
turns are identical to an earlier episode's (same prompts, tools and answers) are duplicates.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.conversation import call_conversation, normalise_message, normalise_tools
from orchard_cli.errors import UsageError
from orchard_cli.images import images_dir
from orchard_cli.proxy.calls import CallRecord
from orchard_cli.records import ReadReport
from orchard_cli.trajectory import Trajectory, read_trajectories


class EpisodeFilter(BaseModel):
    """Which episodes become training data. Empty lists mean 'any'."""

    model_config = ConfigDict(extra="forbid")

    only_resolved: bool = True
    """Keep only episodes whose outcome is resolved."""
    suites: list[str] = Field(default_factory=list)
    harnesses: list[str] = Field(default_factory=list)
    teachers: list[str] = Field(default_factory=list)
    """Teacher model names, as recorded in each trajectory's `model`."""


@dataclass
class Turn:
    """One answer and the prompt it answered, in chat form."""

    prompt: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    answer: dict[str, Any]
    tool_choice: Any = None
    finish_reason: str | None = None
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None


@dataclass
class Episode:
    trajectory: Trajectory
    turns: list[Turn]
    failed_calls: int = 0
    images: Path | None = None
    """The folder its `orchard-image:` references resolve against (its file's `.images/`)."""


class LoadReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    files: list[str] = Field(default_factory=list)
    episodes_read: int = 0
    episodes_used: int = 0
    filtered: dict[str, int] = Field(default_factory=dict)
    """Episodes dropped, by reason: not_resolved, suite, harness, teacher, duplicate, no_turns."""
    failed_calls: int = 0
    """Calls that were not turns (error, non-200 status, no answer)."""
    torn_tails: int = 0


def read_trajectory_file(path: str | Path) -> tuple[list[Trajectory], ReadReport]:
    """Every trajectory of one file (`trajectory.read_trajectories`, strict), and what was skipped.
    A file with none is a one-line UsageError."""
    report = ReadReport(path=str(path))
    trajectories = read_trajectories(path, report=report, strict=True)
    if not trajectories:
        raise UsageError(f"{path} holds no trajectories", hint="is it the output of `orchard distill`?")
    return trajectories, report


def _ok(record: CallRecord) -> bool:
    return record.error is None and record.status == 200 and isinstance(record.response, dict)


def _finish_reason(record: CallRecord) -> str | None:
    response = record.response if isinstance(record.response, dict) else {}
    if record.endpoint == "chat":
        choices = response.get("choices") or [{}]
        return choices[0].get("finish_reason")
    status = response.get("status")
    return {"completed": "stop", "incomplete": "length"}.get(status, status)


def call_turn(record: CallRecord) -> Turn | None:
    """The turn of one recorded call; None when the call failed or has no assistant answer."""
    if not _ok(record):
        return None
    messages, tools = call_conversation(record)
    if not messages or messages[-1].get("role") != "assistant" or len(messages) < 2:
        return None
    request = record.request if isinstance(record.request, dict) else {}
    answer = messages[-1]
    if not answer.get("content") and not answer.get("tool_calls"):
        return None
    turn = Turn(prompt=messages[:-1], tools=tools, answer=answer, tool_choice=request.get("tool_choice"),
                finish_reason=_finish_reason(record))
    if record.prompt_token_ids and record.completion_token_ids:
        turn.prompt_ids, turn.completion_ids = list(record.prompt_token_ids), list(record.completion_token_ids)
    return turn


def message_turns(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[Turn]:
    """One turn per assistant message of a conversation (for episodes stored without calls)."""
    normal = [normalise_message(m) for m in messages if isinstance(m, dict)]
    chat_tools = normalise_tools(tools)
    return [Turn(prompt=normal[:i], tools=chat_tools, answer=m, finish_reason="stop")
            for i, m in enumerate(normal) if m["role"] == "assistant" and i > 0]


def episode_of(trajectory: Trajectory) -> Episode:
    if not trajectory.calls:
        return Episode(trajectory, message_turns(trajectory.messages, trajectory.tools))
    turns, failed = [], 0
    for record in sorted(trajectory.calls, key=lambda r: r.seq):
        turn = call_turn(record)
        if turn is None:
            failed += 1
        else:
            turns.append(turn)
    return Episode(trajectory, turns, failed)


def _fingerprint(episode: Episode) -> str:
    body = [[t.prompt, t.tools, t.answer] for t in episode.turns]
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _reason(t: Trajectory, filters: EpisodeFilter) -> str | None:
    if filters.only_resolved and not t.outcome.resolved:
        return "not_resolved"
    if filters.suites and t.suite not in filters.suites:
        return "suite"
    if filters.harnesses and t.harness not in filters.harnesses:
        return "harness"
    if filters.teachers and t.model not in filters.teachers:
        return "teacher"
    return None


def load_episodes(paths: list[str | Path], filters: EpisodeFilter | None = None) -> tuple[list[Episode], LoadReport]:
    """The episodes of every file that pass the filters, without duplicates, with their turns."""
    if not paths:
        raise UsageError("no trajectory file given", hint="pass --trajectories FILE (written by orchard distill)")
    filters = filters or EpisodeFilter()
    report = LoadReport(files=[str(p) for p in paths])
    dropped: Counter[str] = Counter()
    seen: set[str] = set()
    kept: list[Episode] = []
    for path in paths:
        trajectories, read = read_trajectory_file(path)
        report.torn_tails += int(read.torn_tail)
        for trajectory in trajectories:
            report.episodes_read += 1
            reason = _reason(trajectory, filters)
            if reason:
                dropped[reason] += 1
                continue
            episode = episode_of(trajectory)
            episode.images = images_dir(path)
            report.failed_calls += episode.failed_calls
            if not episode.turns:
                dropped["no_turns"] += 1
                continue
            key = _fingerprint(episode)
            if key in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(key)
            kept.append(episode)
    report.episodes_used = len(kept)
    report.filtered = dict(sorted(dropped.items()))
    return kept, report


def task_ids(episodes: list[Episode]) -> set[str]:
    return {e.trajectory.task_id for e in episodes}
