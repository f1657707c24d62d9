"""`orchard eval`: the rollout core with a scorecard sink.

For every selected task and attempt, one episode (`episode.run_episode`) through the pool; each
result is appended to results.jsonl before the next is reported. The run folder and its files
are `orchard_cli.runs.RunFolder`'s.

`regrade_run(RUN)` grades the stored evidence of a finished run again, without the solver, into
RUN/regrade/ (a judge or a fixed grader, added later).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from orchard_cli import __version__
from orchard_cli.errors import UsageError
from orchard_cli.evidence import EVIDENCE_FILE, Evidence
from orchard_cli.runs import RunFolder
from orchard_cli.runs.predictions import PredictionsLog
from orchard_cli.prereqs import require_host
from orchard_cli.records import JsonlWriter, read_json, sha256_file, write_json, write_text
from orchard_cli.rollout.agent import Price
from orchard_cli.rollout.episode import Episode, EpisodeResult
from orchard_cli.rollout.failures import EpisodeFailure
from orchard_cli.rollout.pool import Pool, reap_orphans, spread_environments
from orchard_cli.rollout.rows import result_row, trajectory_of
from orchard_cli.rollout.choose import make_solver, user_config
from orchard_cli.rollout.solvers import Solution, SolveContext, Solver, SolverBase
from orchard_cli.scoring.report import render_html, render_markdown
from orchard_cli.scoring.scorecard import AttemptResult, Reproducibility, Scorecard, compute_scorecard
from orchard_cli.family import Family, RunOptions, Task, family_categories
from orchard_cli.selection import SelectionFields, TaskSelection
from orchard_cli.trajectory import episode_key

CONFIG_SCHEMA_VERSION = 1
# Fields that may differ between a run and its --resume: they do not change any result.
NOT_COMPARED_ON_RESUME = frozenset({"workers", "fail_under", "max_errors", "orchard_version", "out",
                                    "judge_model", "judge_base_url", "judge_key_env", "retry_errors",
                                    "api_key_env"})  # where a key is read from decides no result


class EvalConfig(SelectionFields):
    """`config.json`: everything that decides a run's results (and how it was asked for)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = CONFIG_SCHEMA_VERSION
    dataset_sha256: str | None = None
    network: Literal["none", "full"] = "none"
    """`--network full`: tasks that browse or search the live web run (else they are needs_network);
    SWE instances are graded with the network."""
    backend: str = "local"
    attempts: int = Field(1, ge=1)
    source: str = ""
    """'gold', 'empty', 'predictions:<file name>' or 'model:<name>@<harness>'."""
    predictions: str | None = None
    predictions_sha256: str | None = None
    model: str | None = None
    base_url: str | None = None
    harness: str | None = None
    seed: int | None = None
    max_turns: int | None = Field(None, ge=1)
    """Agent runs: the harness's turn limit (default: the episode default, 50)."""
    timeout: float | None = Field(None, gt=0)
    """Agent runs: seconds one harness run may take (default: the episode default, 1800). Runs
    written before the one CLI vocabulary call it `agent_timeout` (read as this)."""
    max_calls: int | None = Field(None, ge=1)
    """Agent runs: model calls allowed per episode (default: the episode default, 100)."""
    max_tokens: int | None = Field(None, ge=1)
    """Agent runs: tokens allowed per episode (default: no cap)."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """`--price MODEL=IN,OUT`: USD per million tokens of --model (otherwise the cost is unknown)."""
    api_key_env: str | None = None
    """The variable holding --base-url's key (never the key itself); default OPENAI_API_KEY."""
    workers: int = Field(1, ge=1)
    retry_errors: int | None = Field(None, ge=0)
    """An attempt lost to an env/infra error runs again, up to this many times, in the run (what a
    benchmark's own runner does to have every task's attempts graded: Claw-Eval's); one still lost
    counts as not passed. 0: none runs again. None: the family's `error_retries` (0 unless it says)."""
    fail_under: float | None = None
    max_errors: int = Field(0, ge=0)
    user_model: str | None = None
    """The model playing multi-turn tasks' users (`--user-model`); None: those tasks are needs_user."""
    user_base_url: str | None = None
    user_key_env: str | None = None
    judge_model: str | None = None
    """An LLM judge (`--judge-model`): its score goes beside each verdict, never inside it."""
    judge_base_url: str | None = None
    judge_key_env: str | None = None
    out: str = ""
    orchard_version: str = __version__

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        """A config.json from before `--agent-timeout` became `--timeout` reads the same."""
        if isinstance(data, dict) and "agent_timeout" in data:
            data = dict(data)
            old = data.pop("agent_timeout")
            data.setdefault("timeout", old)
        return data

    @property
    def run_options(self) -> RunOptions:
        """What every episode of the run is handed (the judge without its key: read when used)."""
        judge = None
        if self.judge_model and self.judge_base_url:
            from orchard_cli.scoring.rubric_judge import JudgeConfig

            judge = JudgeConfig(model=self.judge_model, base_url=self.judge_base_url, key_env=self.judge_key_env)
        return RunOptions(backend=self.backend, network=self.network, judge=judge, user=self.user_model is not None,
                          repo_mirror=self.repo_mirror)

    def compared(self) -> dict[str, Any]:
        data = self.model_dump()
        if data.get("family") is None:  # runs from before --family compare equal
            data.pop("family")
        return {k: v for k, v in data.items() if k not in NOT_COMPARED_ON_RESUME}


def _v1_provenance(family: Any) -> dict[str, Any]:
    """A version-1 family handed in directly (not through `open_suite`) keeps its provenance."""
    legacy = getattr(family, "legacy", None)
    return dict(legacy.provenance() or {}) if legacy is not None else {}


class EvalRun:
    """A validated run: the tasks, the solver, and the run folder. `execute()` runs it."""

    def __init__(self, config: EvalConfig, family: Family, tasks: list[Task], solver: Solver,
                 out: Path, resume: bool, provenance: dict[str, Any] | None = None) -> None:
        from orchard_cli.seam_v1 import adapt

        family = adapt(family)
        sha = (provenance or {}).get("dataset_sha256") or _v1_provenance(family).get("dataset_sha256")
        if config.dataset_sha256 is None and sha:
            config = config.model_copy(update={"dataset_sha256": sha})
        self.config, self.family, self.tasks, self.solver = config, family, tasks, solver
        self.out, self.resume = out, resume
        self.judge: Any = None
        """An LLM judge (`orchard_cli.scoring.rubric_judge.Judge`) scoring each graded episode beside its verdict."""
        self.done: set[tuple[str, int]] = set()
        self.prior_wall = 0.0
        if resume:
            self._check_resume()
        elif self.out.exists() and any(self.out.iterdir()):
            raise UsageError(f"output folder {self.out} is not empty",
                             hint="pass --resume to continue that run, or choose another --out")
        pending = [(t, k) for t in tasks for k in range(1, config.attempts + 1)
                   if (t.task_id, k) not in self.done]
        self.pending = spread_environments(pending, family) if config.workers > 1 else pending

    def _check_resume(self) -> None:
        path = self.folder.config
        if not path.exists():
            if self.out.exists() and any(self.out.iterdir()):
                raise UsageError(f"{self.out} is not an orchard eval run (no config.json); cannot --resume")
            return
        try:
            old = EvalConfig.model_validate(read_json(path)).compared()
        except ValidationError as exc:
            raise UsageError(f"--resume: {path} is not an eval configuration this orchard can read "
                             f"({exc.error_count()} problem(s), first: {exc.errors()[0]['msg']})",
                             hint="use a new --out folder") from None
        new = self.config.compared()
        diff = sorted(k for k in set(new) | set(old) if old.get(k) != new.get(k))
        if diff:
            shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff[:3])
            raise UsageError(f"--resume: {self.out} was made with a different configuration ({shown})",
                             hint="rerun with the original options, or use a new --out folder")
        self.done = {(r.instance_id, r.attempt) for r in self.folder.latest_results() if not r.is_error}
        try:  # wall time adds up over the sessions of a resumed run
            self.prior_wall = float(self.folder.read_scorecard().get("wall_seconds") or 0.0)
        except (UsageError, ValueError, TypeError):
            self.prior_wall = 0.0

    @property
    def folder(self) -> RunFolder:
        """The run folder (`out`) and its files."""
        return RunFolder(self.out)

    def episode(self, task: Task, k: int) -> Episode:
        return Episode(task=task, attempt=k, solver=self.solver,
                       episode_id=episode_key(task.suite, task.task_id, self.solver.harness, self.solver.model, k),
                       log_dir=self.folder.log_dir(task.task_id, k))

    def execute(self, on_result: Callable[[AttemptResult], None] | None = None) -> Scorecard:
        """Run every pending episode; each result is on disk before the next is reported. On
        Ctrl-C the sandboxes are destroyed and a partial scorecard (complete: false) is written."""
        from orchard_cli.env import connect

        env = connect(self.config.backend)  # before anything is written: a dead backend leaves no folder
        if self.resume:
            reap_orphans(env)
        self.out.mkdir(parents=True, exist_ok=True)
        if not self.folder.config.exists():
            write_json(self.folder.config, self.config)
        self.folder.write_tasks(self.tasks)
        started = time.time()
        sink = _ScorecardSink(self)
        pool = Pool(env, self.family, options=self.config.run_options, workers=self.config.workers)

        lost: list[tuple[Task, int]] = []

        def finished(result: EpisodeResult) -> None:
            row = sink.write(result)
            if row.is_error:
                lost.append((result.task, result.attempt))
            if on_result:
                on_result(row)

        try:
            pool.run([self.episode(t, k) for t, k in self.pending], finished)
            for _ in range(self.error_retries()):  # the lost attempts again; the latest result counts
                again, lost[:] = list(lost), []
                if not again:
                    break
                pool.run([self.episode(t, k) for t, k in again], finished)
        except BaseException:
            try:  # never mask the interrupt or the original error
                sink.close(env)
                self.write_scorecard(started)
            except Exception:
                pass
            raise
        sink.close(env)
        return self.write_scorecard(started)

    def error_retries(self) -> int:
        """How often an attempt lost to an env/infra error runs again (--retry-errors, else the family's)."""
        if self.config.retry_errors is not None:
            return self.config.retry_errors
        return int(getattr(self.family, "error_retries", 0) or 0)

    def write_scorecard(self, started: float) -> Scorecard:
        selected = {t.task_id for t in self.tasks}
        results = [r for r in self.folder.latest_results() if r.instance_id in selected]
        card = compute_scorecard(
            results, suite=self.tasks[0].suite if self.tasks else self.config.suite, source=self.config.source,
            expected=len(self.tasks) * self.config.attempts, started_at=started,
            model_ran=self.solver.model_ran, family=self.family.name,
            categories=family_categories(self.family), benchmark=getattr(self.family, "benchmark", None),
            reproducibility=Reproducibility(
                orchard_version=__version__, harness=self.config.harness,
                harness_version=self.solver.version, dataset_sha256=self.config.dataset_sha256,
                seed=self.config.seed, config=self.config.model_dump()))
        card.wall_seconds += self.prior_wall
        write_json(self.folder.scorecard, card)
        write_text(self.folder.scorecard_md, render_markdown(card, results))
        write_text(self.folder.scorecard_html, render_html(card, results, self.out))
        return card


class _ScorecardSink:
    """Where eval's results go: results.jsonl, predictions (patch families), trajectories (agents)."""

    def __init__(self, run: EvalRun) -> None:
        self.run = run
        self.results = JsonlWriter(run.folder.results)
        self.predictions = PredictionsLog(run.out)
        self.trajectories: JsonlWriter | None = None
        self._lock = threading.Lock()

    def write(self, result: EpisodeResult) -> AttemptResult:
        run, evidence, solution = self.run, result.evidence, result.solution
        judged = self.judge(result)
        if evidence is not None and evidence.patch is not None:
            model = (solution.model if solution else None) or run.solver.name
            self.predictions.write(result.attempt, result.task.task_id, model, evidence.patch)
        trajectory = None
        if solution is not None and solution.agent is not None:
            if self.trajectories is None:
                self.trajectories = JsonlWriter(run.folder.trajectories, images=True)
            self.trajectories.write(trajectory_of(result, {"upstream": _upstream(run.solver), "seed": run.config.seed,
                                                           "run": "eval"}))
            trajectory = RunFolder.TRAJECTORIES
        row = result_row(result, groups=run.family.groups(result.task), trajectory=trajectory,
                         log_dir=str(result.log_dir.relative_to(run.out)) if result.log_dir else "")
        row.judge = judged
        self.results.write(row)
        return row

    def judge(self, result: EpisodeResult) -> dict[str, Any] | None:
        """The judge's verdict on a graded episode (None without a judge, or for an error)."""
        judge = self.run.judge
        if judge is None or result.outcome.is_error:
            return None
        family, task = self.run.family, result.task
        with family.episode(task, self.run.config.run_options) as episode:
            prompt = episode.prompt("/workspace")
        verdict = judge.grade(prompt, family.describe(task).get("judge_rubric"), result.evidence)
        return verdict.model_dump()

    def close(self, env: Any) -> None:
        self.results.close()
        if self.trajectories is not None:
            self.trajectories.close()
        try:
            env.close()  # destroys any sandbox still alive (an interrupted episode's)
        finally:
            self.predictions.close()
            self.run.solver.close()  # an agent stops its proxy and endpoint


def _upstream(solver: Solver) -> str | None:
    from orchard_cli.rollout.agent import AgentSolver

    if isinstance(solver, AgentSolver) and solver.upstream is not None:
        return solver.upstream.describe()
    return None


def plan_eval(config: EvalConfig, *, resume: bool = False) -> EvalRun:
    """Load the suite, build the solver, check the run folder; nothing is written yet."""
    from orchard_cli.families import check_host, open_suite

    if config.judge_model and not config.judge_base_url:  # before anything loads
        raise UsageError("--judge-model needs --judge-base-url (the judge's OpenAI-compatible endpoint)")
    options = config.run_options
    family, suite = open_suite(config.selection, options)
    tasks = suite.tasks
    if not tasks:
        raise UsageError(f"no tasks selected from {config.suite}",
                         hint="check --instances / --repo / --limit / --slice")
    require_host(backend=config.backend, family=family.name, harness=config.harness, network=config.network,
                 what=f"{Path(config.suite).name} on the {config.backend} backend")
    check_host(family, tasks, options, what=f"{Path(config.suite).name} on the {config.backend} backend")
    solver = make_solver(predictions=config.predictions, harness=config.harness, model=config.model,
                         base_url=config.base_url, seed=config.seed, family=family, tasks=tasks, options=options,
                         max_turns=config.max_turns, timeout=config.timeout, max_calls=config.max_calls,
                         max_tokens=config.max_tokens, price=config.prices.get(config.model or ""),
                         api_key_env=config.api_key_env,
                         user=user_config(config.user_model, config.user_base_url, config.user_key_env),
                         suite_ids=lambda: _suite_ids(config.selection),
                         suite_tasks=lambda: _suite_tasks(config.selection))
    updates: dict[str, Any] = {"source": solver.name}
    if config.predictions and config.predictions not in ("gold", "empty"):
        updates["predictions_sha256"] = sha256_file(config.predictions)
    config = config.model_copy(update=updates)
    judge = None
    if options.judge is not None:  # a judge that cannot be had fails now, not after the first episode
        from orchard_cli.scoring.rubric_judge import Judge

        judge = Judge(options.judge)
    run = EvalRun(config, family, tasks, solver, Path(config.out), resume, provenance=suite.provenance)
    run.judge = judge
    return run


def _suite_tasks(selection: TaskSelection) -> list[Task]:
    """Every task of the selection's suite, its filters aside."""
    from orchard_cli.families import load_suite

    return load_suite(selection.unfiltered())[1]


def narrow_limit(run: EvalRun) -> str | None:
    """A note when `--limit N` (the suite's first N tasks) picked tasks of one group only while
    the suite spans several: a sample of one category reads as the suite's."""
    selection = run.config.selection
    if not selection.limit or selection.instances or selection.slice or selection.groups or selection.sample \
            or len(run.tasks) < 2:
        return None
    for name, value in run.family.groups(run.tasks[0]).items():
        if any(run.family.groups(t).get(name) != value for t in run.tasks):
            continue
        try:
            values = {run.family.groups(t).get(name) for t in _suite_tasks(selection)}
        except Exception:  # a note is not worth failing a run for
            return None
        if len(values) > 1:
            return (f"note: --limit {selection.limit} takes the suite's first {len(run.tasks)} tasks, all of {name} "
                    f"{value} (the suite spans {len(values)}); --sample N spreads over them, --group or --instances choose")
    return None


def _suite_ids(selection: TaskSelection) -> set[str]:
    """Every task id of the selection's suite, its filters aside."""
    return {t.task_id for t in _suite_tasks(selection)}


def verdict(card: Scorecard, *, fail_under: float | None, max_errors: int) -> tuple[int, str | None]:
    """(exit code, reason): 3 when more instances errored than allowed, 1 below --fail-under."""
    if card.instances_with_errors > max_errors:
        return 3, (f"{card.instances_with_errors} instance(s) ended in env/infra errors "
                   f"(--max-errors {max_errors})")
    if card.total == 0:
        return 3, "nothing was graded"
    if fail_under is not None and card.resolved_rate < fail_under:
        return 1, f"resolved rate {card.resolved_rate:.1%} is below --fail-under {fail_under:.1%}"
    return 0, None


# ---- regrade ------------------------------------------------------------------------------------

class RecordedSolver(SolverBase):
    """The evidence a finished run stored, handed to the grader again. An episode that ended
    before it had evidence (an environment that would not build, a task refused for what the run
    lacked: needs_network, needs_judge...) ends the same way again."""

    def __init__(self, run: Path, source: str, results: dict[tuple[str, int], AttemptResult]) -> None:
        self.run, self.results = run, results
        self.name = f"regrade:{source}"
        self.harness, self.model = "regrade", source or "regrade"

    def needs_sandbox(self, family: Family) -> bool:
        return False

    def solve(self, context: SolveContext) -> Solution:
        row = self.results[(context.task.task_id, context.attempt)]
        path = self.run / row.log_dir / EVIDENCE_FILE
        if not path.is_file():  # an episode refused before it ran (needs_network, ...) or lost to an error
            from orchard_cli.outcome import REQUIREMENT_CATEGORIES

            kept = row.is_error or row.category in REQUIREMENT_CATEGORIES
            raise EpisodeFailure(row.category if kept else "infra_error",
                                 row.error or f"no stored evidence ({path.name} missing)")
        return Solution(evidence=Evidence.model_validate(read_json(path)), model=row.model,
                        tokens_in=row.tokens_in, tokens_out=row.tokens_out, cost_usd=row.cost_usd,
                        recorded=True)


def _free(run: Path, name: str, resume: bool) -> Path:
    """RUN/regrade, or (when an earlier regrade holds it) RUN/regrade-2, -3 ...: a second regrade
    needs no invented --out. With --resume: the latest one."""
    folders = [run / name] + [run / f"{name}-{k}" for k in range(2, 1000)]
    taken = [f for f in folders if f.exists() and any(f.iterdir())]
    if resume:
        return taken[-1] if taken else folders[0]
    return next(f for f in folders if f not in taken)


def plan_regrade(run: str | Path, *, out: str | Path | None = None, workers: int = 1,
                 backend: str | None = None, resume: bool = False) -> EvalRun:
    """An eval of a finished run's stored evidence: the suite loaded as the run loaded it, the
    same attempts, no solver."""
    from orchard_cli.families import open_suite

    run = Path(run)
    folder = RunFolder(run).require(config=True)
    try:
        original = EvalConfig.model_validate(folder.read_config())
    except ValidationError as exc:
        raise UsageError(f"{folder.config} is not an eval configuration ({exc.errors()[0]['msg']})") from None
    options = original.run_options.model_copy(update={"backend": backend or original.backend})
    family, suite = open_suite(original.selection, options)
    tasks = suite.tasks
    require_host(backend=options.backend, family=family.name, network=original.network, what=f"regrading {run}")
    sha = suite.provenance.get("dataset_sha256")
    if original.dataset_sha256 and sha and sha != original.dataset_sha256:
        raise UsageError(f"the data of {original.suite} changed since {run} was made (sha256 differs)",
                         hint="regrade with the data the run used")
    results = {(r.instance_id, r.attempt): r for r in folder.latest_results()}
    if not results:
        raise UsageError(f"{run} has no results to regrade")
    solver = RecordedSolver(run, original.source, results)
    config = original.model_copy(update={
        "source": solver.name, "workers": workers, "backend": backend or original.backend,
        "out": str(Path(out).resolve() if out else _free(run, "regrade", resume)), "predictions": None, "model": None,
        "harness": None, "base_url": None, "predictions_sha256": None,
        "retry_errors": 0})  # the stored evidence grades the same way each time
    ran = {task_id for task_id, _ in results}
    regrade = EvalRun(config, family, [t for t in tasks if t.task_id in ran], solver, Path(config.out), resume,
                      provenance=suite.provenance)
    regrade.pending = [(t, k) for t, k in regrade.pending if (t.task_id, k) in results]
    return regrade
