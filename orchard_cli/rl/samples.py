"""A rollout: one episode as an RL trainer needs it, and the group-normalized advantage.

Token ids come from the policy endpoint itself (vLLM's `return_token_ids`, `orchard serve`'s
same field), through the recording proxy's call records: nothing is tokenized again. Per call:
the prompt ids the policy saw, the completion ids it produced (its end-of-turn token included when
it stopped on one) and their log-probabilities. The calls of an episode become `segments`: a
segment is a prompt and a response, where the response holds every policy token (mask 1) and, for
a multi-turn episode, the tokens the environment added between two calls (tool results, the next
user turn; mask 0). A call whose prompt does not start with everything before it (the harness
rewrote its history) starts a new segment, as `orchard train --builder merged` does.

Reward (`reward_kind`): the share of the family's checks passed where it reports checks (claw,
Claw-Eval; 0 for an unsafe episode), else 1 for resolved and 0 for not. An episode that ended in an
environment or infrastructure error, or a timeout, is no evidence about the policy: it keeps its
record but is not `trainable` and takes no part in its group's statistics. Nor is an episode with a
call whose endpoint returned no token ids (`untracked_calls`): its tokens cannot be trained on
exactly, and merged with the others they would read as the environment's.

Advantage (GRPO, as TRL computes it with `scale_rewards="group"`): within a task's group of
attempts, (reward - mean) / (std + 1e-4), std with Bessel's correction; a group whose rewards are
all equal has advantage 0 everywhere (it teaches nothing).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.outcome import ERROR_CATEGORIES, Outcome

SCHEMA_VERSION = 2  # 2 adds each call's `weight_version`; schema 1 rollouts read as before
ADVANTAGE_EPS = 1e-4
UNTRAINABLE = ERROR_CATEGORIES | {"timeout"}


class PolicyCall(BaseModel):
    """One policy call of an episode, as the endpoint returned it."""

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    """One per completion id: the policy's log-probability of that token when it was sampled."""
    finish_reason: str | None = None
    weight_version: str | None = None
    """The weights that produced it, when the server says (`orchard serve` does)."""


class Segment(BaseModel):
    """A prompt and the response after it; `response_mask` 1 marks the policy's own tokens."""

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    rollout_log_probs: list[float]
    """The policy's log-probability per response token (0.0 where the mask is 0)."""


class Rollout(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1, 2] = SCHEMA_VERSION
    episode_id: str
    uid: str
    """The group: attempts at one task in one step share it (verl's `uid`)."""
    suite: str
    task_id: str
    attempt: int
    step: int | None = None
    """The `orchard rl` step that made it (None for `orchard rollout`)."""
    policy: str
    """The model name asked for, and where (`name@url`)."""
    harness: str
    category: str
    resolved: bool
    reward: float
    reward_kind: Literal["resolved", "checks"]
    advantage: float = 0.0
    trainable: bool = True
    calls: list[PolicyCall] = Field(default_factory=list)
    segments: list[Segment] = Field(default_factory=list)
    untracked_calls: int = 0
    """Successful calls whose endpoint returned no token ids (not trained on; a non-zero count
    means the endpoint ignores `return_token_ids`)."""
    duration_seconds: float = 0.0

    @property
    def policy_tokens(self) -> int:
        return sum(sum(s.response_mask) for s in self.segments)


def reward_of(outcome: Outcome) -> tuple[float, Literal["resolved", "checks"]]:
    """The episode's reward and what it is (see the module's docstring)."""
    from orchard_cli.scoring.checks import check_fields

    score = check_fields(outcome.tests)["score"] if outcome.tests else None
    if score is not None:
        return (0.0 if outcome.category == "unsafe" else float(score)), "checks"
    return float(outcome.resolved), "resolved"


def calls_of(records: list[Any]) -> tuple[list[PolicyCall], int]:
    """The policy calls of an episode's call records (successful ones), and how many had no ids."""
    calls, untracked = [], 0
    for record in records:
        if record.error is not None or record.status != 200:
            continue
        if not record.completion_token_ids or record.prompt_token_ids is None:
            untracked += 1
            continue
        ids = list(record.completion_token_ids)
        logprobs = list(record.logprobs or [])
        if len(logprobs) != len(ids):
            untracked += 1
            continue
        calls.append(PolicyCall(prompt_ids=list(record.prompt_token_ids), completion_ids=ids, logprobs=logprobs,
                                finish_reason=_finish(record.response), weight_version=record.weight_version))
    return calls, untracked


def _finish(response: Any) -> str | None:
    try:
        return response["choices"][0].get("finish_reason")
    except (TypeError, KeyError, IndexError, AttributeError):
        return None


def segments_of(calls: list[PolicyCall]) -> list[Segment]:
    """Consecutive calls merged while each prompt extends the sequence so far."""
    out: list[Segment] = []
    current: Segment | None = None
    for call in calls:
        if current is not None:
            seen = current.prompt_ids + current.response_ids
            if call.prompt_ids[:len(seen)] == seen and len(call.prompt_ids) >= len(seen):
                added = call.prompt_ids[len(seen):]
                current.response_ids += added + call.completion_ids
                current.response_mask += [0] * len(added) + [1] * len(call.completion_ids)
                current.rollout_log_probs += [0.0] * len(added) + call.logprobs
                continue
            out.append(current)
        current = Segment(prompt_ids=list(call.prompt_ids), response_ids=list(call.completion_ids),
                          response_mask=[1] * len(call.completion_ids), rollout_log_probs=list(call.logprobs))
    if current is not None:
        out.append(current)
    return out


def group_advantages(rewards: list[float]) -> list[float]:
    """(r - mean) / (std + 1e-4) within one group (Bessel's std; one member: 0)."""
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + ADVANTAGE_EPS) for r in rewards]


def reward_stats(rollouts: list[Rollout]) -> tuple[int, float | None, int]:
    """(trainable rollouts, their mean reward, groups whose rewards differ: the only ones with signal)."""
    trainable = [r for r in rollouts if r.trainable]
    rewards: dict[str, set[float]] = {}
    for r in trainable:
        rewards.setdefault(r.uid, set()).add(r.reward)
    mean = round(sum(r.reward for r in trainable) / len(trainable), 4) if trainable else None
    return len(trainable), mean, sum(len(v) > 1 for v in rewards.values())


def assign_advantages(group: list[Rollout]) -> None:
    """Set `advantage` on every trainable member of one group (in place); others get 0."""
    members = [r for r in group if r.trainable]
    for rollout, advantage in zip(members, group_advantages([r.reward for r in members])):
        rollout.advantage = advantage
    for rollout in group:
        if not rollout.trainable:
            rollout.advantage = 0.0


def rollout_of(result: Any, *, uid: str, policy: str, step: int | None = None) -> Rollout:
    """An `EpisodeResult` of an agent solver -> its rollout (advantage still 0)."""
    outcome = result.outcome
    agent = result.solution.agent if result.solution is not None else None
    calls, untracked = calls_of(agent.records if agent is not None else [])
    reward, kind = reward_of(outcome)
    trainable = outcome.category not in UNTRAINABLE and bool(calls) and not untracked
    return Rollout(episode_id=result.episode_id, uid=uid, suite=result.task.suite, task_id=result.task.task_id,
                   attempt=result.attempt, step=step, policy=policy, harness=result.solver.harness,
                   category=outcome.category, resolved=outcome.resolved, reward=reward, reward_kind=kind,
                   trainable=trainable, calls=calls, segments=segments_of(calls), untracked_calls=untracked,
                   duration_seconds=result.duration_seconds)
