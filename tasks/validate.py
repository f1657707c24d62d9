"""`orchard tasks validate PATH`: tasks checked three ways, as a real run would grade them.

    gold       the task's gold solution replayed (tool calls, commands, answer)   must pass
    null       nothing done (the empty solver)                                   must fail
    near miss  the family's `near_miss(task)`: a plausible wrong solution         must fail

For any family with gold solutions and near misses (claw, web).

Each runs as an episode of the rollout core on the chosen backend: the services are reset, not
restarted, between attempts. An episode that errors (infra_error, env_error) makes the task
invalid too: a check that cannot run proves nothing.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.family import RunOptions, Task
from orchard_cli.rollout.solvers import EmptySolver, GoldSolver

WAYS = ("gold", "null", "near_miss")


class NearMissSolver(GoldSolver):
    """The task's near miss (`EpisodeEnv.reference("near_miss")`), replayed as gold is."""

    name = harness = model = kind = "near_miss"


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    way: str
    category: str
    resolved: bool
    expected: str
    ok: bool
    checks: str = ""
    error: str | None = None


class TaskValidation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str
    valid: bool
    verdicts: list[Verdict] = Field(default_factory=list)

    def reason(self) -> str:
        bad = [v for v in self.verdicts if not v.ok]
        return "; ".join(f"{v.way} {v.category} (expected {v.expected}){': ' + v.error if v.error else ''}"
                         for v in bad)


def validate_tasks(family: Any, tasks: list[Task], *, backend: str = "local", workers: int = 1,
                   on_task: Callable[[TaskValidation], None] | None = None) -> list[TaskValidation]:
    """Run the three ways for every task (workers episodes at once); one result per task."""
    from orchard_cli.env import connect
    from orchard_cli.rollout.choose import reference
    from orchard_cli.rollout.episode import Episode
    from orchard_cli.rollout.pool import Pool

    from orchard_cli.seam_v1 import adapt

    family = adapt(family)  # a version-1 family made directly (not through load_suite)
    solvers = {"gold": GoldSolver(), "null": EmptySolver(), "near_miss": NearMissSolver()}
    without = {t.task_id for t in tasks if reference(family, t, RunOptions(backend=backend), "near_miss") is None}
    episodes = [Episode(task=t, attempt=1, solver=solvers[way], episode_id=f"validate-{way}-{t.task_id}")
                for t in tasks for way in WAYS if not (way == "near_miss" and t.task_id in without)]
    found: dict[str, dict[str, Verdict]] = {t.task_id: {} for t in tasks}
    for task_id in without:  # a task that ships no near miss is checked two ways, and says so
        found[task_id]["near_miss"] = Verdict(way="near_miss", category="none", resolved=False, expected="not resolved",
                                              ok=True, error="the task has no near miss to run")
    results: dict[str, TaskValidation] = {}

    def on_result(result: Any) -> None:
        way = result.solver.name if result.solver.name in WAYS else "null"
        outcome = result.outcome
        expected = "resolved" if way == "gold" else "not resolved"
        ok = not outcome.is_error and outcome.resolved == (way == "gold")
        found[result.task.task_id][way] = Verdict(
            way=way, category=outcome.category, resolved=outcome.resolved, expected=expected, ok=ok,
            checks=str(outcome.tests.get("summary", "")), error=outcome.error)
        if len(found[result.task.task_id]) == len(WAYS):
            verdicts = [found[result.task.task_id][w] for w in WAYS]
            done = TaskValidation(task_id=result.task.task_id, valid=all(v.ok for v in verdicts), verdicts=verdicts)
            results[done.task_id] = done
            if on_task is not None:
                on_task(done)

    from orchard_cli.families import check_host

    check_host(family, tasks, RunOptions(backend=backend))
    env = connect(backend)
    try:
        Pool(env, family, options=RunOptions(backend=backend), workers=workers).run(episodes, on_result)
    finally:
        env.close()
    return [results[t.task_id] for t in tasks if t.task_id in results]
