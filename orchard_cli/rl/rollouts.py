"""Rollouts through the rollout core, and `orchard rollout`.

`Rollouts` runs G attempts per task: each attempt is an episode of the one pool (a sandbox, the
task's setup, a real harness whose model calls go through the recording proxy, the family's
evidence and grader), against one or more policy endpoints (attempts are dealt round-robin over
them). Every policy call is asked for its token ids and log-probabilities (`return_token_ids`,
`logprobs`) at the sampling temperature, through the proxy's `extra_body`, so the harness itself
needs no change. When every attempt of a task has finished, the group's advantages are computed
and the group is handed over (`on_group`): `orchard rollout` appends it to its JSONL file at once
(one fsynced line per rollout), `orchard rl` trains on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli import __version__
from orchard_cli.errors import UsageError
from orchard_cli.rl.samples import Rollout, assign_advantages, reward_stats, rollout_of
from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions, Upstream
from orchard_cli.rollout.distill_run import run_dir_of
from orchard_cli.rollout.episode import Episode, EpisodeResult
from orchard_cli.rollout.pool import Pool
from orchard_cli.family import Family, RunOptions, Task
from orchard_cli.selection import TaskSelection
from orchard_cli.trajectory import episode_key


class Sampling(BaseModel):
    """How the policy samples during rollouts (sent with every call, over the harness's own)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0, le=2)
    max_new_tokens: int | None = Field(None, ge=1)
    """Cap on each call's completion (`max_tokens`); None leaves the harness's own."""

    def extra_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"logprobs": True, "return_token_ids": True, "temperature": self.temperature}
        if self.max_new_tokens is not None:  # both spellings: servers prefer max_completion_tokens
            body["max_tokens"] = body["max_completion_tokens"] = self.max_new_tokens
        return body

    def proxy_options(self) -> dict[str, Any]:
        """The recording proxy's options for policy calls: the sampling fields on every call, and
        chat upstream (a Responses harness, Codex, is translated), the API that returns token ids."""
        return {"extra_body": self.extra_body(), "upstream_dialects": ["chat"]}


class Policy:
    """One policy endpoint: the model name asked for, and the agent that drives it."""

    def __init__(self, upstream: Upstream, model: str, harness: Any, sampling: Sampling,
                 options: EpisodeOptions) -> None:
        self.upstream, self.model = upstream, model
        self.label = f"{model}@{upstream.describe()}"
        self.solver = AgentSolver(harness, model=model, upstream=upstream, options=options,
                                  proxy_options=sampling.proxy_options())

    def close(self) -> None:
        self.solver.close()


def policies(urls: list[str], model: str | None, key_env: str | None, harness: Any, sampling: Sampling,
             options: EpisodeOptions) -> list[Policy]:
    """One `Policy` per URL (or in-package endpoint name); a URL needs the model name it serves."""
    out = []
    for url in urls or [None]:  # type: ignore[list-item]
        upstream = Upstream(url, key_env)
        name = model or upstream.name
        if not name:
            raise UsageError(f"name the policy's model for {url}: --model NAME (the name the endpoint serves)")
        out.append(Policy(upstream, name, harness, sampling, options))
    return out


class Rollouts:
    """G attempts per task over the pool, grouped, with advantages."""

    def __init__(self, family: Family, policies: list[Policy], *, env: Any, backend: str,
                 workers: int = 1, log_root: Path | None = None) -> None:
        self.family, self.policies, self.env, self.backend = family, policies, env, backend
        self.workers, self.log_root = workers, log_root

    def run(self, tasks: list[Task], group_size: int, *, step: int | None = None,
            on_group: Callable[[list[Rollout]], None] | None = None) -> list[Rollout]:
        """Every attempt of every task; each finished group goes to `on_group` as it completes."""
        harness = self.policies[0].solver.harness
        plan: list[tuple[Episode, Policy, str]] = []
        for t, task in enumerate(tasks):
            uid = task.task_id if step is None else f"{step}:{task.task_id}"
            for k in range(1, group_size + 1):
                policy = self.policies[(t * group_size + k - 1) % len(self.policies)]
                key = episode_key(task.suite, task.task_id, harness, policy.model, k)
                episode_id = key if step is None else f"s{step:06d}-{key}"
                log_dir = self.log_root / episode_id if self.log_root is not None else None
                plan.append((Episode(task=task, attempt=k, solver=policy.solver, episode_id=episode_id,
                                     log_dir=log_dir), policy, uid))
        by_id = {e.episode_id: (p, uid) for e, p, uid in plan}
        pending: dict[str, list[Rollout]] = {}
        done: list[Rollout] = []

        def finished(result: EpisodeResult) -> None:
            policy, uid = by_id[result.episode_id]
            group = pending.setdefault(uid, [])
            group.append(rollout_of(result, uid=uid, policy=policy.label, step=step))
            if len(group) == group_size:
                group.sort(key=lambda r: r.attempt)
                assign_advantages(group)
                done.extend(group)
                del pending[uid]
                if on_group is not None:
                    on_group(group)

        Pool(self.env, self.family, options=RunOptions(backend=self.backend),
             workers=self.workers).run([e for e, _, _ in plan], finished)
        return done


class RolloutConfig(BaseModel):
    """What `orchard rollout` was asked to do (written beside the output as `X.run/config.json`)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    selection: TaskSelection
    policy_urls: list[str] = Field(default_factory=list)
    """OpenAI-compatible URLs (or in-package endpoint names); empty: the embedded model."""
    model: str | None = None
    api_key_env: str | None = None
    harness: str = "chat"
    group_size: int = Field(4, ge=1)
    sampling: Sampling = Field(default_factory=Sampling)
    workers: int = Field(1, ge=1)
    backend: str = "local"
    out: str = "rollouts.jsonl"
    parquet: str | None = None
    options: EpisodeOptions = Field(default_factory=EpisodeOptions)
    orchard_version: str = __version__


class RolloutSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    out: str
    parquet: str | None
    parquet_rows: int
    tasks: int
    episodes: int
    trainable: int
    mean_reward: float | None
    reward_kind: list[str]
    groups_with_signal: int
    """Groups whose rewards differ (the only ones with a non-zero advantage)."""
    policy_tokens: int
    untracked_calls: int
    by_category: dict[str, int]
    wall_seconds: float
    episodes_per_s: float
    policy_tokens_per_s: float


def summarize(config: RolloutConfig, tasks: int, rollouts: list[Rollout], rows: int, seconds: float) -> RolloutSummary:
    trainable, mean, signal = reward_stats(rollouts)
    by_category: dict[str, int] = {}
    for r in rollouts:
        by_category[r.category] = by_category.get(r.category, 0) + 1
    tokens = sum(r.policy_tokens for r in rollouts)
    return RolloutSummary(
        out=config.out, parquet=config.parquet, parquet_rows=rows, tasks=tasks, episodes=len(rollouts),
        trainable=trainable, mean_reward=mean, reward_kind=sorted({r.reward_kind for r in rollouts if r.trainable}),
        groups_with_signal=signal, policy_tokens=tokens,
        untracked_calls=sum(r.untracked_calls for r in rollouts), by_category=dict(sorted(by_category.items())),
        wall_seconds=round(seconds, 3), episodes_per_s=round(len(rollouts) / seconds, 3) if seconds else 0.0,
        policy_tokens_per_s=round(tokens / seconds, 2) if seconds else 0.0)


def run_rollout(config: RolloutConfig, on_group: Callable[[list[Rollout]], None] | None = None,
                on_planned: Callable[[int], None] | None = None) -> RolloutSummary:
    """`orchard rollout`: every group on disk as it finishes, then the Parquet file and a summary.
    `on_planned` hears the number of episodes once the suite is loaded."""
    from orchard_cli.env import connect
    from orchard_cli.records import JsonlWriter, write_json
    from orchard_cli.rl.columns import write_parquet
    from orchard_cli.rollout.agent import load_ready_harness
    from orchard_cli.families import check_host, load_suite

    out = Path(config.out)
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder; name the rollouts file", hint=f"e.g. --out {out / 'rollouts.jsonl'}")
    if out.exists() and out.stat().st_size:
        raise UsageError(f"{out} already holds rollouts", hint="choose another --out, or remove it")
    harness = load_ready_harness(config.harness)
    family, tasks = load_suite(config.selection, RunOptions(backend=config.backend))
    if not tasks:
        raise UsageError(f"no tasks selected from {config.selection.suite}",
                         hint="check --instances / --repo / --limit / --slice")
    from orchard_cli.prereqs import require_host

    what = f"{Path(config.selection.suite).name} on the {config.backend} backend"
    require_host(backend=config.backend, family=family.name, harness=config.harness, what=what)
    check_host(family, tasks, RunOptions(backend=config.backend), what=what)
    found = policies(config.policy_urls, config.model, config.api_key_env, harness, config.sampling, config.options)
    if on_planned is not None:
        on_planned(len(tasks) * config.group_size)
    run_dir = run_dir_of(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "config.json", config)
    started = time.monotonic()
    env = connect(config.backend)
    writer = JsonlWriter(out)
    rollouts: list[Rollout] = []

    def keep(group: list[Rollout]) -> None:
        for rollout in group:
            writer.write(rollout)
        rollouts.extend(group)
        if on_group is not None:
            on_group(group)

    try:
        Rollouts(family, found, env=env, backend=config.backend, workers=config.workers,
                 log_root=run_dir / "logs").run(tasks, config.group_size, on_group=keep)
    finally:
        writer.close()
        for policy in found:
            policy.close()
        env.close()
    seconds = time.monotonic() - started
    rows = write_parquet(rollouts, config.parquet) if config.parquet else 0
    summary = summarize(config, len(tasks), rollouts, rows, seconds)
    write_json(run_dir / "summary.json", summary)
    nothing_trainable(rollouts, where=str(run_dir / "logs"))
    return summary


def nothing_trainable(rollouts: list[Rollout], *, where: str) -> None:
    """Raise when no rollout can be trained on: every episode failed, or the endpoint returned no
    token ids (exit 3, the rollouts kept on disk for a look)."""
    from orchard_cli.errors import InfraError

    if not rollouts or any(r.trainable for r in rollouts):
        return
    untracked = sum(r.untracked_calls for r in rollouts)
    if untracked:
        raise InfraError(f"none of the {len(rollouts)} episodes can be trained on: {untracked} model call(s) came "
                         "back without token ids (the endpoint ignores return_token_ids)",
                         hint="serve the policy with orchard serve, or vLLM (which honours return_token_ids)")
    cats = sorted({r.category for r in rollouts})
    raise InfraError(f"none of the {len(rollouts)} episodes can be trained on (outcomes: {', '.join(cats)})",
                     hint=f"see {where}")


def read_rollouts(path: str | Path) -> list[Rollout]:
    """The rollouts of a JSONL file (`orchard rollout --out`, or an `orchard rl` run's)."""
    from pydantic import ValidationError

    from orchard_cli.records import read_jsonl

    rows, report = read_jsonl(path)
    out = []
    for number, row in enumerate(rows, 1):
        try:
            out.append(Rollout.model_validate(row))
        except ValidationError as exc:
            raise UsageError(f"{path}: record {number} is not a rollout ({exc.error_count()} errors)",
                             hint="pass a file written by `orchard rollout` or `orchard rl`") from None
    if not out:
        raise UsageError(f"{path} holds no rollouts")
    return out
