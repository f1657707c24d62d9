"""The one loop that pairs a task with an attempt source in a sandbox, grades it, and records it.

For every selected instance and attempt: get a patch from the attempt source, create a sandbox
(`family.sandbox_spec`), `family.setup`, `family.grade`, destroy the sandbox (always). An attempt
source that works inside a sandbox (an agent harness) gets its own sandbox, set up for the task,
and the patch it leaves is graded in a fresh one, as SWE-bench grades a patch on a clean checkout.
An empty patch is `empty_patch` without a sandbox (SWE-bench does not evaluate empty patches).

Failures are categorised, never called 'unresolved': an exception while creating the sandbox or
grading is `infra_error`, one from `family.setup` is `env_error` (unless the sandbox itself
failed: `infra_error`). The loop keeps going after a failed instance.

With several workers, attempts are queued round-robin over the family's environments
(`spread_environments`), so that two workers do not start by waiting on one environment's build.

A run folder holds: config.json, results.jsonl (appended as each attempt finishes),
predictions.jsonl (SWE-bench format; attempts after the first in predictions-attempt-K.jsonl),
scorecard.json / .md / .html, and logs/<instance_id>/attempt-<k>/.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchard_cli import __version__
from orchard_cli.attempts import Attempt, AttemptSource, make_source
from orchard_cli.env import SandboxHandle, connect
from orchard_cli.errors import OrchardError, SandboxError, UsageError
from orchard_cli.predictions import PredictionsLog
from orchard_cli.records import JsonlWriter, read_json, read_jsonl, write_json, write_text
from orchard_cli.scoring.report import render_html, render_markdown
from orchard_cli.scoring.scorecard import (
    AttemptResult,
    Reproducibility,
    Scorecard,
    compute_scorecard,
    latest_results,
)
from orchard_cli.tasks.base import ERROR_CATEGORIES, Outcome, Task

CONFIG_SCHEMA_VERSION = 1
# Fields that may differ between a run and its --resume: they do not change any result.
STOP_GRACE_SECONDS = 30.0  # on Ctrl-C, how long running attempts get to wind down
NOT_COMPARED_ON_RESUME = frozenset({"workers", "fail_under", "max_errors", "orchard_version", "out"})


class EvalConfig(BaseModel):
    """`config.json`: everything that decides a run's results (and how it was asked for)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = CONFIG_SCHEMA_VERSION
    suite: str
    dataset: str | None = None
    dataset_sha256: str | None = None
    instances: list[str] | None = None
    repo: str | None = None
    limit: int | None = None
    slice: str | None = None
    repo_mirror: str | None = None
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
    agent_timeout: float | None = Field(None, gt=0)
    """Agent runs: seconds one harness run may take (default: the episode default, 1800)."""
    workers: int = Field(1, ge=1)
    fail_under: float | None = None
    max_errors: int = Field(0, ge=0)
    out: str = ""
    orchard_version: str = __version__

    def compared(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if k not in NOT_COMPARED_ON_RESUME}


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def safe_name(name: str) -> str:
    """A file-system-safe folder name for an instance id."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "instance"


class _Failed(Exception):
    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


@contextmanager
def _phase(category: str, what: str, env_errors: tuple[type[BaseException], ...] = ()):
    """Turn any exception into a categorised failure whose message names the phase and cause:
    the sandbox failing is infra_error, the family's environment error is env_error anywhere."""
    try:
        yield
    except _Failed:
        raise
    except Exception as exc:
        if isinstance(exc, SandboxError):
            category = "infra_error"
        elif env_errors and isinstance(exc, env_errors):
            category = "env_error"
        text = exc.message if isinstance(exc, OrchardError) else f"{type(exc).__name__}: {exc}"
        raise _Failed(category, f"{what}: {' '.join(str(text).split())}") from exc


def _counts(tests: dict[str, Any]) -> dict[str, Any]:
    """The test counts of an Outcome (numbers and short strings); per-test detail goes to logs."""
    out: dict[str, Any] = {}
    for key, value in tests.items():
        if isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 200):
            out[key] = value
        elif isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values()):
            out[key] = value
    return out


class EvalRun:
    """A validated run: the tasks, the source of patches, and the run folder. `execute()` runs it."""

    def __init__(self, config: EvalConfig, family: Any, tasks: list[Task], source: AttemptSource,
                 out: Path, resume: bool) -> None:
        if config.dataset_sha256 is None and getattr(family, "dataset_sha256", None):
            config = config.model_copy(update={"dataset_sha256": family.dataset_sha256})
        self.config, self.family, self.tasks, self.source = config, family, tasks, source
        env_error = getattr(family, "environment_error", None)
        self.env_errors = (env_error,) if isinstance(env_error, type) else ()
        self.out, self.resume = out, resume
        self.done: set[tuple[str, int]] = set()
        self.prior_wall = 0.0
        self._stopping = threading.Event()
        self.predictions = PredictionsLog(out)
        if resume:
            self._check_resume()
        elif self.out.exists() and any(self.out.iterdir()):
            raise UsageError(f"output folder {self.out} is not empty",
                             hint="pass --resume to continue that run, or choose another --out")
        pending = [(t, k) for t in tasks for k in range(1, config.attempts + 1)
                   if (t.task_id, k) not in self.done]
        self.pending = spread_environments(pending, family) if config.workers > 1 else pending

    def _check_resume(self) -> None:
        path = self.out / "config.json"
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
        diff = sorted(k for k in new if old.get(k) != new.get(k))
        if diff:
            shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff[:3])
            raise UsageError(f"--resume: {self.out} was made with a different configuration ({shown})",
                             hint="rerun with the original options, or use a new --out folder")
        rows, _ = read_jsonl(self.out / "results.jsonl")
        self.done = {(r.instance_id, r.attempt) for r in latest_results(rows) if not r.is_error}
        try:  # wall time adds up over the sessions of a resumed run
            self.prior_wall = float(read_json(self.out / "scorecard.json").get("wall_seconds") or 0.0)
        except (UsageError, ValueError, TypeError):
            self.prior_wall = 0.0

    # ---- one attempt -------------------------------------------------------------------------

    def _sandbox(self, env: Any, task: Task, for_agent: bool = False) -> SandboxHandle:
        with _phase("env_error", "describing the environment", self.env_errors):
            spec = self.family.sandbox_spec(task, self.config.backend)
        adapt = getattr(self.source, "adapt_spec", None)
        if for_agent and callable(adapt):  # the agent's sandbox: proxy network, harness mounts
            with _phase("infra_error", f"preparing the sandbox for {self.source.name}", self.env_errors):
                spec = adapt(task, spec)
        if self._stopping.is_set():
            raise _Failed("infra_error", "the run was interrupted")
        with _phase("infra_error", "creating the sandbox", self.env_errors):
            sandbox = SandboxHandle.create(env, spec)
        if self._stopping.is_set():  # created while the run was being stopped
            self._destroy(sandbox)
            raise _Failed("infra_error", "the run was interrupted")
        return sandbox

    def _prepared(self, env: Any, task: Task, for_agent: bool = False) -> SandboxHandle:
        sandbox = self._sandbox(env, task, for_agent)
        try:
            with _phase("env_error", "setting up the environment", self.env_errors):
                self.family.setup(task, sandbox)
        except BaseException:
            self._destroy(sandbox)
            raise
        return sandbox

    @staticmethod
    def _destroy(sandbox: SandboxHandle) -> None:
        try:
            sandbox.destroy()
        except Exception:  # reaped later by `orchard env gc`; the verdict stands
            pass

    def run_attempt(self, env: Any, task: Task, k: int) -> AttemptResult:
        rel = f"logs/{safe_name(task.task_id)}/attempt-{k}"
        log_dir = self.out / rel
        log_dir.mkdir(parents=True, exist_ok=True)
        started = time.time()
        attempt: Attempt | None = None
        try:
            if self.source.needs_sandbox:
                sandbox = self._prepared(env, task, for_agent=True)
                try:
                    with _phase("infra_error", f"{self.source.name} attempt", self.env_errors):
                        attempt = self.source.solve(task, sandbox, attempt=k, log_dir=log_dir)
                finally:
                    self._destroy(sandbox)
            else:
                with _phase("infra_error", "getting the patch", self.env_errors):
                    attempt = self.source.solve(task, None, attempt=k, log_dir=log_dir)
            (log_dir / "patch.diff").write_text(attempt.patch, encoding="utf-8")
            self.predictions.write(k, task.task_id, attempt.model or self.source.name, attempt.patch)
            if not attempt.patch.strip():
                outcome = Outcome(resolved=False, category="empty_patch")
            else:
                sandbox = self._prepared(env, task)
                try:
                    with _phase("infra_error", "grading", self.env_errors):
                        outcome = self.family.grade(task, sandbox, attempt.patch)
                finally:
                    self._destroy(sandbox)
        except _Failed as failed:
            outcome = Outcome(resolved=False, category=failed.category, error=str(failed))  # type: ignore[arg-type]
        outcome = settle(attempt, outcome)
        self._record(task, k, attempt, outcome, log_dir)
        return self._finish(task, k, attempt, outcome, rel, started)

    def _record(self, task: Task, k: int, attempt: Attempt | None, outcome: Outcome, log_dir: Path) -> None:
        """A source that keeps a record of the attempt (an agent's trajectory) gets the verdict."""
        recorder = getattr(self.source, "record", None)
        if attempt is None or not callable(recorder):
            return
        try:
            attempt.trajectory = recorder(task, k, outcome, self.out)
        except Exception as exc:  # the verdict stands without its trajectory
            (log_dir / "trajectory-error.txt").write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")

    def _finish(self, task: Task, k: int, attempt: Attempt | None, outcome: Outcome, rel: str,
                started: float) -> AttemptResult:
        log_dir = self.out / rel
        if outcome.log:
            (log_dir / "test_output.txt").write_text(outcome.log, encoding="utf-8")
        script = self._eval_script(task)
        if script:
            (log_dir / "eval.sh").write_text(script, encoding="utf-8")
        if outcome.error:
            (log_dir / "error.txt").write_text(outcome.error + "\n", encoding="utf-8")
        write_json(log_dir / "outcome.json", {"schema_version": 1, **outcome.model_dump(exclude={"log"})})
        patch = attempt.patch if attempt else ""
        return AttemptResult(
            instance_id=task.task_id, attempt=k, repo=task.repo, resolved=outcome.resolved,
            category=outcome.category, tests=_counts(outcome.tests),
            duration_seconds=round(time.time() - started, 3), patch_bytes=len(patch.encode()),
            patch_files=len(re.findall(r"^diff --git ", patch, re.MULTILINE)), log_dir=rel,
            error=outcome.error, model=attempt.model if attempt else None,
            tokens_in=attempt.tokens_in if attempt else None,
            tokens_out=attempt.tokens_out if attempt else None,
            cost_usd=attempt.cost_usd if attempt else None,
            trajectory=attempt.trajectory if attempt else None,
            started_at=started, finished_at=time.time())

    def _eval_script(self, task: Task) -> str | None:
        """The script that ran the tests: the family's optional `eval_script(task)` hook (the SWE
        family has one), else None."""
        try:
            hook = getattr(self.family, "eval_script", None)
            if callable(hook):
                return hook(task)
        except Exception:  # a log file is not worth failing an attempt for
            return None
        return None

    # ---- the run -----------------------------------------------------------------------------

    def execute(self, on_result: Callable[[AttemptResult], None] | None = None) -> Scorecard:
        """Run every pending attempt; each result is on disk before the next is reported. On
        Ctrl-C the sandboxes are destroyed and a partial scorecard (complete: false) is written."""
        env = connect(self.config.backend)  # before anything is written: a dead backend leaves no folder
        self.out.mkdir(parents=True, exist_ok=True)
        if not (self.out / "config.json").exists():
            write_json(self.out / "config.json", self.config)
        started = time.time()
        results = JsonlWriter(self.out / "results.jsonl")
        pool = ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="orchard-eval")
        futures: dict[Any, tuple[Task, int]] = {}
        try:
            futures = {pool.submit(self.run_attempt, env, t, k): (t, k) for t, k in self.pending}
            for future in as_completed(futures):
                try:
                    result = future.result()
                except Exception as exc:  # a bug or a disk error in one attempt: record it, go on
                    task, k = futures[future]
                    result = AttemptResult(instance_id=task.task_id, attempt=k, repo=task.repo,
                                           category="infra_error", error=f"{type(exc).__name__}: {exc}",
                                           finished_at=time.time())
                results.write(result)
                if on_result:
                    on_result(result)
        except BaseException:
            # Stop: no new sandboxes, queued attempts cancelled, live sandboxes destroyed (their
            # commands fail at once), a short wait for the running attempts, then clean up again.
            self._stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            try:
                interrupt = getattr(self.family, "interrupt", None)
                if callable(interrupt):  # builds in progress (an environment, an image) stop too
                    interrupt()
                env.close()
                wait([f for f in futures if not f.cancelled()], timeout=STOP_GRACE_SECONDS)
                self._close(env, results)
                self.write_scorecard(started)
            except Exception:  # never mask the interrupt or the original error
                pass
            raise
        pool.shutdown(wait=True)
        self._close(env, results)
        return self.write_scorecard(started)

    def _close(self, env: Any, results: JsonlWriter) -> None:
        results.close()
        try:
            env.close()  # destroys any sandbox still alive (an interrupted attempt's)
        finally:
            self.predictions.close()
            closer = getattr(self.source, "close", None)
            if callable(closer):  # an agent source stops its proxy and closes its trajectories
                closer()

    def write_scorecard(self, started: float) -> Scorecard:
        rows, _ = read_jsonl(self.out / "results.jsonl")
        selected = {t.task_id for t in self.tasks}
        results = [r for r in latest_results(rows) if r.instance_id in selected]
        card = compute_scorecard(
            results, suite=self.tasks[0].suite if self.tasks else self.config.suite, source=self.config.source,
            expected=len(self.tasks) * self.config.attempts, started_at=started,
            model_ran=self.source.model_ran,
            reproducibility=Reproducibility(
                orchard_version=__version__, harness=self.config.harness,
                harness_version=self.source.version, dataset_sha256=self.config.dataset_sha256,
                seed=self.config.seed, config=self.config.model_dump()))
        card.wall_seconds += self.prior_wall
        write_json(self.out / "scorecard.json", card)
        write_text(self.out / "scorecard.md", render_markdown(card, results))
        write_text(self.out / "scorecard.html", render_html(card, results))
        return card


def spread_environments(pending: list[tuple[Task, int]], family: Any) -> list[tuple[Task, int]]:
    """Pending attempts round-robin over the family's environments (its optional `env_key(task)`),
    so that parallel workers start on different environments rather than one waiting on the
    other's build. Within an environment, and for a family without the hook, file order stays."""
    key_of = getattr(family, "env_key", None)
    if not callable(key_of):
        return list(pending)
    groups: dict[Any, list[tuple[Task, int]]] = {}
    for task, k in pending:
        try:
            key = key_of(task)
        except Exception:  # the attempt itself reports why; here it is an environment of its own
            key = ("no env_key", task.task_id)
        groups.setdefault(key, []).append((task, k))
    queues = list(groups.values())
    depth = max((len(q) for q in queues), default=0)
    return [q[i] for i in range(depth) for q in queues if i < len(q)]


def settle(attempt: Attempt | None, outcome: Outcome) -> Outcome:
    """What an unresolved attempt counts as when its source says the model is not to blame
    (`attempt.info["failure"]`): infra_error when the model could not be reached, timeout when
    the agent ran out of time. Never 'unresolved' for those."""
    failure = attempt.info.get("failure") if attempt else None
    if not failure or outcome.resolved or outcome.category in ERROR_CATEGORIES:
        return outcome
    return outcome.model_copy(update={"category": failure["category"], "error": failure["error"]})


def plan_eval(config: EvalConfig, *, resume: bool = False) -> EvalRun:
    """Load the suite, build the patch source, check the run folder; nothing is written yet."""
    from orchard_cli.tasks.registry import load_suite

    family, tasks = load_suite(config.suite, dataset=config.dataset, instances=config.instances,
                               repo=config.repo, limit=config.limit, slice_=config.slice,
                               repo_mirror=config.repo_mirror)
    if not tasks:
        raise UsageError(f"no tasks selected from {config.suite}",
                         hint="check --instances / --repo / --limit / --slice")
    source = make_source(config, family, {t.task_id for t in tasks})
    updates: dict[str, Any] = {"source": source.name}
    if config.predictions and config.predictions not in ("gold", "empty"):
        updates["predictions_sha256"] = sha256_file(config.predictions)
    config = config.model_copy(update=updates)
    return EvalRun(config, family, tasks, source, Path(config.out), resume)


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
