"""One episode: prepare -> solve -> collect -> grade, for any family and any solver.

    with family.episode(task, options) as env:          the episode's own state, given back on exit
        env.requires unmet?                              a requirement category, before any sandbox
        solver works in a sandbox?          yes: create (env.spec, adapted by the solver), env.setup,
                                                 solve, env.collect; env.grade here when the family
                                                 grades in place; destroy (always)
                                            no:  solve, env.collect (without a sandbox)
        env.grade(evidence, None)           a verdict that needs no sandbox (SWE: empty_patch)
        grading = "fresh"                   a new sandbox, set up for grading, grades the evidence

Failures are categorised, never called 'unresolved' (see `failures.py`). The result carries the
evidence, which is written to the episode's log folder with the verdict, so `regrade` can grade
it again without the solver.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchard_cli.env import SandboxHandle
from orchard_cli.evidence import EVIDENCE_FILE, Evidence
from orchard_cli.family import RunOptions
from orchard_cli.outcome import Outcome
from orchard_cli.records import write_json
from orchard_cli.rollout.failures import EpisodeFailure, phase, settle
from orchard_cli.rollout.solvers import Solution, SolveContext, Solver

if TYPE_CHECKING:
    from orchard_cli.family import EpisodeEnv, Family, Task


class LiveSandboxes:
    """The sandboxes a pool's episodes hold right now (for heartbeats). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, SandboxHandle] = {}

    def add(self, sandbox: SandboxHandle) -> None:
        with self._lock:
            self._held[sandbox.id] = sandbox

    def remove(self, sandbox: SandboxHandle) -> None:
        with self._lock:
            self._held.pop(sandbox.id, None)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._held)


@dataclass
class EpisodeResult:
    """A finished episode: the verdict, what it was read from, and what the solver did."""

    task: "Task"
    attempt: int
    episode_id: str
    solver: Solver
    outcome: Outcome
    evidence: Evidence | None = None
    solution: Solution | None = None
    started_at: float = field(default_factory=time.time)
    duration_seconds: float = 0.0
    log_dir: Path | None = None


@dataclass
class Episode:
    """What the pool runs: one attempt of one solver at one task."""

    task: "Task"
    attempt: int
    solver: Solver
    episode_id: str
    log_dir: Path | None = None


class _Run:
    """The sandboxes of one episode (the env service, the options and the stop flag, bound once)."""

    def __init__(self, env: Any, options: RunOptions, stopping: threading.Event, live: LiveSandboxes,
                 activity: Any = None, env_errors: tuple[type[BaseException], ...] = ()) -> None:
        self.env, self.options, self.stopping, self.live = env, options, stopping, live
        self.activity = activity
        """The episode's `live.Activity` (a person watching sees its phase), or None."""
        self.env_errors = env_errors
        """A version-1 family's `environment_error`: env_error in any phase, as before the adapter."""

    def step(self, phase: str) -> None:
        if self.activity is not None:
            self.activity.set_phase(phase)

    def sandbox(self, episode: "EpisodeEnv", solver: Solver | None, *, for_grading: bool = False) -> SandboxHandle:
        task = episode.task
        self.step("sandbox")
        with phase("env_error", "describing the environment", self.env_errors):
            spec = episode.spec(self.options.backend)  # what it reserves, the episode gives back on exit
        if solver is not None:
            # an agent's first adapt starts its model's proxy: an embedded model loads here (~40 s)
            self.step("starting the model" if solver.model_ran else "sandbox")
            with phase("infra_error", f"preparing the sandbox for {solver.name}", self.env_errors):
                spec = solver.adapt(task, spec)
            self.step("sandbox")
        if self.stopping.is_set():
            raise EpisodeFailure("infra_error", "the run was interrupted")
        with phase("infra_error", "creating the sandbox", self.env_errors):
            sandbox = SandboxHandle.create(self.env, spec)
        self.live.add(sandbox)
        if self.stopping.is_set():  # created while the run was being stopped
            self.destroy(sandbox)
            raise EpisodeFailure("infra_error", "the run was interrupted")
        try:
            self.step("setup")
            with phase("env_error", "setting up the environment", self.env_errors):
                episode.setup(sandbox, for_grading=for_grading)
        except BaseException:
            self.destroy(sandbox)
            raise
        return sandbox

    def destroy(self, sandbox: SandboxHandle) -> None:
        self.live.remove(sandbox)
        try:
            sandbox.destroy()
        except Exception:  # reaped later by `orchard env gc`; the verdict stands
            pass

    def grade(self, episode: "EpisodeEnv", evidence: Evidence, sandbox: SandboxHandle | None) -> Outcome | None:
        self.step("grading")
        with phase("infra_error", "grading", self.env_errors):
            outcome = episode.grade(evidence, sandbox)
        if outcome is None and sandbox is not None:
            raise EpisodeFailure("infra_error", "grading: the family gave no verdict")
        return outcome

    def grade_fresh(self, episode: "EpisodeEnv", evidence: Evidence) -> Outcome:
        quick = self.grade(episode, evidence, None)
        if quick is not None:
            return quick
        sandbox = self.sandbox(episode, None, for_grading=True)
        try:
            return self.grade(episode, evidence, sandbox)  # type: ignore[return-value]
        finally:
            self.destroy(sandbox)


def run_episode(episode: Episode, *, family: "Family", env: Any, options: RunOptions,
                stopping: threading.Event | None = None, live: LiveSandboxes | None = None,
                activity: Any = None) -> EpisodeResult:
    """One episode, start to verdict. Never raises for a failure of the task, the solver, the
    model or the sandbox: each ends as a categorised result. `activity` (a `live.Activity`)
    shows a person watching which phase it is in."""
    from orchard_cli.seam_v1 import adapt

    family = adapt(family)
    run = _Run(env, options, stopping or threading.Event(), live or LiveSandboxes(), activity,
               tuple(getattr(family, "environment_error", ())))
    task, solver = episode.task, episode.solver
    started, clock = time.time(), time.monotonic()
    context = SolveContext(task=task, family=family, attempt=episode.attempt, episode_id=episode.episode_id,
                           log_dir=episode.log_dir, stopping=run.stopping, activity=activity)
    solution: Solution | None = None
    evidence: Evidence | None = None
    outcome: Outcome | None = None
    script: str | None = None
    try:
        with phase("infra_error", "preparing the episode", run.env_errors):
            env_ = family.episode(task, options)
            env_.__enter__()
        try:
            context.env = env_
            unmet = env_.requires.unmet(options, talks_to_users=bool(getattr(solver, "talks_to_users", False)))
            if unmet is not None:
                raise unmet
            if solver.needs_sandbox(family):
                sandbox = run.sandbox(env_, solver)
                try:
                    context.sandbox = sandbox
                    run.step("agent" if solver.model_ran else solver.harness)
                    with phase("infra_error", f"{solver.name} attempt", run.env_errors):
                        solution = solver.solve(context)
                    run.step("collecting")
                    with phase("infra_error", "collecting the evidence", run.env_errors):
                        evidence = env_.collect(solution, sandbox)
                    if family.grading == "in_place":
                        outcome = run.grade(env_, evidence, sandbox)
                finally:
                    run.destroy(sandbox)
            else:
                run.step("agent" if solver.model_ran else solver.harness)
                with phase("infra_error", f"{solver.name} attempt", run.env_errors):
                    solution = solver.solve(context)
                if solution.recorded:
                    evidence = solution.evidence or Evidence()
                else:
                    with phase("infra_error", "collecting the evidence", run.env_errors):
                        evidence = env_.collect(solution, None)
            if outcome is None:
                outcome = run.grade_fresh(env_, evidence)  # type: ignore[arg-type]
        finally:
            try:
                script = env_.eval_script()
            except Exception:  # a log file is not worth failing an episode for
                script = None
            try:
                env_.__exit__(None, None, None)
            except Exception:  # the family's own housekeeping; the verdict stands
                pass
    except EpisodeFailure as failure:
        outcome = failure.outcome()
    outcome = settle(solution.failure if solution else None, outcome)
    result = EpisodeResult(task=task, attempt=episode.attempt, episode_id=episode.episode_id, solver=solver,
                           outcome=outcome, evidence=evidence, solution=solution, started_at=started,
                           duration_seconds=round(time.monotonic() - clock, 3), log_dir=episode.log_dir)
    write_logs(result, script)
    return result


def write_logs(result: EpisodeResult, script: str | None = None) -> None:
    """The episode's log folder, for a person to read and for `regrade`: the evidence, the
    patch, the test output, the script that graded, the verdict, the error."""
    log_dir = result.log_dir
    if log_dir is None:
        return
    log_dir.mkdir(parents=True, exist_ok=True)
    outcome = result.outcome
    for stale in log_dir.glob("step-*.png"):  # an earlier try of this attempt (--resume): its pages are not these
        stale.unlink()
    if result.evidence is not None:
        write_json(log_dir / EVIDENCE_FILE, result.evidence)
        if result.evidence.patch is not None:
            (log_dir / "patch.diff").write_text(result.evidence.patch, encoding="utf-8")
        for name, data in result.evidence.attachments.items():
            if name == Path(name).name and not name.startswith("."):
                (log_dir / name).write_bytes(data)
    if outcome.log:
        (log_dir / "test_output.txt").write_text(outcome.log, encoding="utf-8")
    if script:
        (log_dir / "eval.sh").write_text(script, encoding="utf-8")
    if outcome.error:
        (log_dir / "error.txt").write_text(outcome.error + "\n", encoding="utf-8")
    write_json(log_dir / "outcome.json", {"schema_version": 1, **outcome.model_dump(exclude={"log"})})
