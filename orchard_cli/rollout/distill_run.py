"""`orchard distill`: the rollout core with a trajectories sink.

Every task x `attempts` x teacher is one episode of an `AgentSolver` (one per teacher, sharing one
upstream), run through the pool. Each finished episode is appended to the trajectories file at
once (one fsynced line; a crash never leaves a torn line that reads as valid), and to the run's
ledger, which also lists the episodes `--keep resolved` left out. `--resume` skips every episode
already finished (by episode id, which names the teacher, so one file collects several teachers);
episodes that ended in env/infra errors are run again, and readers take the latest line.

Beside `X.jsonl` the run keeps `X.run/`: config.json, episodes.jsonl (the ledger),
summary.json, and logs/<episode_id>/ (evidence, harness output, patch, test output).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli import __version__
from orchard_cli.errors import UsageError
from orchard_cli.outcome import ERROR_CATEGORIES
from orchard_cli.records import JsonlWriter, iter_jsonl, write_json
from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions, Price, Upstream
from orchard_cli.rollout.episode import Episode, EpisodeResult
from orchard_cli.rollout.pool import Pool, reap_orphans
from orchard_cli.rollout.rows import trajectory_of
from orchard_cli.family import Family, RunOptions, Task
from orchard_cli.selection import SelectionFields
from orchard_cli.trajectory import Trajectory, check_trajectory_file, episode_key


class DistillConfig(SelectionFields):
    """What a distill run was asked to do (`X.run/config.json`)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    network: Literal["none", "full"] = "none"
    """`--network full`: tasks that browse or search the live web run (else they are needs_network);
    SWE instances are graded with the network."""
    user_model: str | None = None
    """The model playing multi-turn tasks' users (`--user-model`); None: those tasks are needs_user."""
    user_base_url: str | None = None
    user_key_env: str | None = None
    teachers: list[str] = Field(default_factory=list)
    """Model names sent upstream; empty means the in-package endpoint's own model."""
    base_url: str | None = None
    """An OpenAI-compatible URL, or an in-package endpoint name (scripted, smollm2)."""
    api_key_env: str | None = None
    """The variable holding the upstream key (never the key itself)."""
    harness: str = "bash"
    attempts: int = Field(1, ge=1)
    workers: int = Field(1, ge=1)
    backend: str = "local"
    keep: Literal["all", "resolved"] = "all"
    out: str = "trajectories.jsonl"
    options: EpisodeOptions = Field(default_factory=EpisodeOptions)
    prices: dict[str, Price] = Field(default_factory=dict)
    """Per teacher, USD per million tokens; a teacher without one has an unknown cost."""
    proxy: dict[str, Any] = Field(default_factory=dict)
    """Recording proxy options (max_retries, retry_backoff_s, read_timeout_s, ...)."""
    orchard_version: str = __version__

    @property
    def run_options(self) -> RunOptions:
        return RunOptions(backend=self.backend, network=self.network, user=self.user_model is not None,
                          repo_mirror=self.repo_mirror)


class TeacherStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episodes: int = 0
    resolved: int = 0
    errors: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = 0.0
    """None as soon as one episode's cost is unknown."""

    def add(self, entry: dict[str, Any]) -> None:
        self.episodes += 1
        self.resolved += int(bool(entry.get("resolved")))
        self.errors += int(entry.get("category") in ERROR_CATEGORIES)
        self.tokens_in += entry.get("tokens_in") or 0
        self.tokens_out += entry.get("tokens_out") or 0
        cost = entry.get("cost_usd")
        self.cost_usd = None if cost is None or self.cost_usd is None else round(self.cost_usd + cost, 6)

    @property
    def resolved_rate(self) -> float:
        return self.resolved / self.episodes if self.episodes else 0.0


class DistillSummary(BaseModel):
    """The run's totals over every planned episode finished so far (this session and earlier)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    out: str
    run_dir: str
    planned: int
    finished: int
    ran: int
    """Episodes run in this session."""
    skipped: int
    """Episodes already finished before this session (--resume)."""
    written: int
    """Trajectory lines this session wrote (fewer than `ran` with --keep resolved)."""
    resolved: int
    resolved_rate: float
    errors: int
    by_category: dict[str, int]
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    teachers: dict[str, TeacherStats]
    wall_seconds: float
    complete: bool


def run_dir_of(out: Path) -> Path:
    return out.with_name(out.name.removesuffix(".jsonl") + ".run")


class DistillRun:
    """A planned run: the episodes still to do and where they go. `execute()` runs them."""

    def __init__(self, config: DistillConfig, family: Family, tasks: list[Task], teachers: list[str],
                 resume: bool, *, harness: Any, upstream: Upstream, provenance: dict[str, Any] | None = None) -> None:
        self.config, self.family, self.tasks, self.teachers = config, family, tasks, teachers
        self.provenance = dict(provenance or {})
        self.harness, self.upstream = harness, upstream
        self.out = Path(config.out)
        self.run_dir = run_dir_of(self.out)
        self.ledger_path = self.run_dir / "episodes.jsonl"
        self.ran = self.written = 0
        self.resumed = resume
        if self.out.is_dir():
            raise UsageError(f"--out {self.out} is a folder; name the trajectories file",
                             hint=f"e.g. --out {self.out / 'trajectories.jsonl'}")
        if not resume and ((self.out.exists() and self.out.stat().st_size) or self.ledger_path.exists()):
            raise UsageError(f"{self.out} already holds trajectories",
                             hint="pass --resume to add the episodes it lacks, or choose another --out")
        if resume and self.out.is_file() and self.out.stat().st_size:
            check_trajectory_file(self.out)  # never append after something that is not ours
        self.planned = [(teacher, task, k) for teacher in teachers for task in tasks
                        for k in range(1, config.attempts + 1)]
        done = self.finished_keys()
        self.pending = [p for p in self.planned if self.key(*p) not in done]

    def key(self, teacher: str, task: Task, k: int) -> str:
        return episode_key(task.suite, task.task_id, self.config.harness, teacher, k)

    def _ledger(self) -> dict[str, dict[str, Any]]:
        """Every finished episode (latest entry each), from the ledger and the trajectories file."""
        entries: dict[str, dict[str, Any]] = {}
        for row in iter_jsonl(self.out):
            outcome = row.get("outcome") or {}
            entries[row.get("episode_id", "")] = {
                "episode_id": row.get("episode_id"), "teacher": row.get("model"),
                "category": outcome.get("category"), "resolved": outcome.get("resolved"),
                "tokens_in": row.get("tokens_in"), "tokens_out": row.get("tokens_out"),
                "cost_usd": row.get("cost_usd")}
        for row in iter_jsonl(self.ledger_path):
            entries[row.get("episode_id", "")] = row
        return entries

    def finished_keys(self) -> set[str]:
        return {k for k, e in self._ledger().items() if e.get("category") not in ERROR_CATEGORIES}

    def solvers(self) -> dict[str, AgentSolver]:
        """One agent per teacher, sharing the upstream (started on first use)."""
        from orchard_cli.rollout.choose import user_config
        from orchard_cli.rollout.user_model import UserModel

        config = user_config(self.config.user_model, self.config.user_base_url, self.config.user_key_env)
        user = UserModel(config) if config is not None else None  # one, shared by the teachers
        out = {}
        for teacher in dict.fromkeys(t for t, _, _ in self.pending):
            price = self.config.prices.get(teacher) or self.upstream.price
            out[teacher] = AgentSolver(self.harness, model=teacher, upstream=self.upstream,
                                       options=self.config.options.model_copy(update={"price": price}),
                                       proxy_options=self.config.proxy, user=user)
        return out

    def execute(self, on_episode: Callable[[Trajectory, TeacherStats], None] | None = None) -> DistillSummary:
        """Run every pending episode; each is on disk before it is reported. On Ctrl-C the
        sandboxes are destroyed, finished episodes are kept, and the summary is written."""
        from orchard_cli.env import connect

        started = time.time()
        env = connect(self.config.backend)
        if self.resumed:
            reap_orphans(env)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_json(self.run_dir / "config.json", self.config)
        totals = TeacherStats()
        writer = JsonlWriter(self.out, images=True)
        ledger = JsonlWriter(self.ledger_path)
        solvers = self.solvers()
        metadata = {"upstream": self.upstream.describe(), "run": "distill",
                    **self.provenance}

        def finished(result: EpisodeResult) -> None:
            record = trajectory_of(result, metadata)
            kept = self.config.keep == "all" or record.outcome.resolved
            if kept:
                writer.write(record)
                self.written += 1
            entry = _entry(record, kept)
            ledger.write(entry)
            self.ran += 1
            totals.add(entry)
            if on_episode:
                on_episode(record, totals)

        episodes = [Episode(task=task, attempt=k, solver=solvers[t], episode_id=self.key(t, task, k),
                            log_dir=self.run_dir / "logs" / self.key(t, task, k)) for t, task, k in self.pending]
        try:
            Pool(env, self.family, options=self.config.run_options, workers=self.config.workers).run(episodes, finished)
        finally:
            writer.close()
            ledger.close()
            for solver in solvers.values():
                solver.close()
            self.upstream.stop()
            try:
                env.close()
            finally:
                summary = self.write_summary(started)
        return summary

    def write_summary(self, started: float) -> DistillSummary:
        entries = self._ledger()
        planned = {self.key(*p): p[0] for p in self.planned}
        teachers = {t: TeacherStats() for t in self.teachers}
        overall = TeacherStats()
        by_category: dict[str, int] = {}
        for key, teacher in planned.items():
            entry = entries.get(key)
            if entry is None:
                continue
            teachers[teacher].add(entry)
            overall.add(entry)
            by_category[entry["category"]] = by_category.get(entry["category"], 0) + 1
        summary = DistillSummary(
            out=str(self.out), run_dir=str(self.run_dir), planned=len(planned), finished=overall.episodes,
            ran=self.ran, skipped=len(self.planned) - len(self.pending), written=self.written,
            resolved=overall.resolved, resolved_rate=round(overall.resolved_rate, 4), errors=overall.errors,
            by_category=dict(sorted(by_category.items())), tokens_in=overall.tokens_in,
            tokens_out=overall.tokens_out, cost_usd=overall.cost_usd if overall.episodes else None,
            teachers=teachers, wall_seconds=round(time.time() - started, 3),
            complete=overall.episodes - overall.errors == len(planned))
        write_json(self.run_dir / "summary.json", summary)
        return summary


def _entry(record: Trajectory, kept: bool) -> dict[str, Any]:
    return {"schema_version": 1, "episode_id": record.episode_id, "task_id": record.task_id,
            "teacher": record.model, "attempt": record.attempt, "category": record.outcome.category,
            "resolved": record.outcome.resolved, "tokens_in": record.tokens_in,
            "tokens_out": record.tokens_out, "cost_usd": record.cost_usd, "kept": kept,
            "duration_seconds": record.duration_seconds, "finished_at": time.time()}


def plan_distill(config: DistillConfig, *, resume: bool = False) -> DistillRun:
    """Check the harness, the endpoint and the output, and load the suite; nothing is started
    or written yet."""
    from orchard_cli.rollout.agent import load_ready_harness
    from orchard_cli.families import check_host, open_suite

    harness = load_ready_harness(config.harness)
    from orchard_cli.rollout.choose import user_config

    if user_config(config.user_model, config.user_base_url, config.user_key_env):
        from orchard_cli.rollout.agent import require_multi_turn

        require_multi_turn(harness)
    upstream = Upstream(config.base_url, config.api_key_env)
    teachers = list(dict.fromkeys(config.teachers))
    if not teachers:
        if not upstream.local:
            raise UsageError("name the teacher model: --model MODEL (the name the endpoint serves)")
        teachers = [upstream.name]  # type: ignore[list-item]
    unknown = sorted(set(config.prices) - set(teachers))
    if unknown:
        raise UsageError(f"--price names a model that is not a teacher: {', '.join(unknown)}")
    family, suite = open_suite(config.selection, config.run_options)
    tasks = suite.tasks
    if not tasks:
        raise UsageError(f"no tasks selected from {config.suite}",
                         hint="check --instances / --repo / --limit / --slice")
    from orchard_cli.prereqs import require_host
    from orchard_cli.rollout.choose import plays_references, require_references

    what = f"{Path(config.suite).name} on the {config.backend} backend"
    require_host(backend=config.backend, family=family.name, harness=config.harness, network=config.network,
                 what=what)
    check_host(family, tasks, config.run_options, what=what)
    kind = plays_references(config.base_url)
    if kind:
        require_references(family, tasks, f"the demonstrator --base-url {config.base_url}",
                           options=config.run_options, kind=kind)
    return DistillRun(config.model_copy(update={"teachers": teachers}), family, tasks, teachers, resume,
                      harness=harness, upstream=upstream, provenance=suite.provenance)
