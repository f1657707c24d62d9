"""The version-1 task-family seam (deprecated): the 22 hooks families implemented before the
two-object seam of `orchard_cli.family` (version 2). A family that still inherits `FamilyBase`
runs through the adapter `orchard_cli.seam_v1` (one deprecation line on stderr for a third-party
family); docs/families.md says what changed. The data types (Task, SuiteInfo, Gold, ...) are the
core's, re-exported here.

One episode, as the rollout core (`orchard_cli.rollout`) runs it:

    spec     = family.sandbox_spec(task, backend)        # then adapted by the solver (proxy, mounts)
    sandbox  = create(spec); family.setup(task, sandbox)
    baseline = family.baseline(task, sandbox)            # what the workspace was before the solver
    tools    = family.tools(task, sandbox)               # the task's tools (a ToolSession), or None
    solution = solver.solve(...)                         # gold, a predictions file, an agent
    evidence = family.collect(task, sandbox, solution, baseline)   # before the sandbox goes
    outcome  = family.grade(task, evidence, sandbox)     # `grading = "in_place"`: this sandbox
                                                         # `grading = "fresh"`: a new one, set up
    destroy(sandbox); family.release(task, spec)         # what sandbox_spec reserved (services)
    ...
    family.close()                                       # the run is over (services stop)
`FamilyBase` gives every optional hook its default; a family inherits it and overrides what it
needs (the reference family `orchard_cli.tasks.calc` fits in 40 lines). The core calls these
methods directly, never `getattr`: `check_family` says at load time what a family lacks.
Third-party families register under the entry-point group `orchard.tasks`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from orchard_cli.evidence import Evidence
from orchard_cli.family import (Gold, GoldCall, SimulatedUser, SuiteInfo, Task, default_prompt, family_categories,
                                solution_evidence)
from orchard_cli.outcome import CORE_CATEGORIES, ERROR_CATEGORIES, CategoryInfo, Outcome
from orchard_cli.seam_v1 import ATTRIBUTES, HOOKS, check_v1 as check_family
from orchard_cli.selection import TaskSelection

if TYPE_CHECKING:
    from orchard_cli.env import SandboxHandle
    from orchard_cli.env.models import SandboxSpec
    from orchard_cli.scoring.rubric_judge import JudgeConfig
    from orchard_cli.tools import ToolSession

__all__ = ["ATTRIBUTES", "CORE_CATEGORIES", "ERROR_CATEGORIES", "HOOKS", "CategoryInfo", "Evidence", "FamilyBase",
           "Gold", "GoldCall", "Outcome", "SimulatedUser", "SuiteInfo", "Task", "TaskFamily", "TaskSelection",
           "check_family", "family_categories"]

Grading = Literal["fresh", "in_place"]


@runtime_checkable
class TaskFamily(Protocol):
    """The whole contract. `FamilyBase` implements every hook below `grade` with a default."""

    name: str
    categories: ClassVar[dict[str, CategoryInfo]]
    """The family's own outcome categories, beyond the core ones (SWE: empty_patch, ...)."""
    grading: ClassVar[Grading]
    """'fresh': graded in a new sandbox set up for the task (SWE-bench's rule); 'in_place': graded
    in the episode's own sandbox, before it is destroyed (state that lives there: services)."""
    environment_error: ClassVar[tuple[type[BaseException], ...]]
    """Exceptions meaning 'the environment cannot be had' (env_error, not infra_error)."""
    suites: ClassVar[tuple[SuiteInfo, ...]]
    """Suites the family serves, found by name (`orchard eval NAME`)."""

    def load(self, selection: TaskSelection, suite: SuiteInfo) -> list[Task]:
        """The tasks of `suite` (its `source`, or `selection.dataset`), filtered by `selection`."""

    def sandbox_spec(self, task: Task, backend: str) -> "SandboxSpec":
        """The sandbox this task runs in, on the named backend."""

    def setup(self, task: Task, sandbox: "SandboxHandle") -> None:
        """Prepare a sandbox for the task; raise one of `environment_error` when it cannot be."""

    def grade(self, task: Task, evidence: Evidence, sandbox: "SandboxHandle") -> Outcome:
        """The verdict on `evidence`, in a fresh sandbox set up for the task, or in the episode's
        own (see `grading`). Read the episode's state from `evidence` (collect gathers it), not
        from the sandbox: `orchard eval regrade` grades stored evidence in a fresh sandbox."""

    # ---- optional hooks (FamilyBase has defaults) --------------------------------------------

    def prompt(self, task: Task, workdir: str) -> str:
        """The task as a user would give it to an agent."""

    def baseline(self, task: Task, sandbox: "SandboxHandle") -> Any:
        """After setup, before a solver works in the sandbox: what `collect` compares against."""

    def collect(self, task: Task, sandbox: "SandboxHandle | None", solution: Any, baseline: Any) -> Evidence:
        """Read the evidence from the episode's sandbox (it is destroyed afterwards), adding to
        what the solver handed over (`solution.evidence`, `solution.answer`). `sandbox` is None
        only for a solver that works without one (a file of patches), which a family graded in
        place never gets; then there is nothing to read but the solution."""

    def quick_verdict(self, task: Task, evidence: Evidence) -> Outcome | None:
        """A verdict that needs no sandbox (SWE: an empty patch is `empty_patch`), else None."""

    def gold_solution(self, task: Task) -> Gold | None:
        """The reference solution (`--predictions gold`), or None when the task has none."""

    def env_key(self, task: Task) -> Hashable | None:
        """Tasks with the same key share an environment build; workers start on different keys."""

    def groups(self, task: Task) -> dict[str, str]:
        """Groupings of the scorecard this task belongs to ({'repo': 'acme/calc'})."""

    def describe(self, task: Task) -> dict[str, Any]:
        """`orchard tasks show`: the task's fields for a person or a script."""

    def provenance(self) -> dict[str, Any]:
        """After `load`: where the tasks came from (`dataset_sha256`, ...), for the scorecard."""

    def eval_script(self, task: Task) -> str | None:
        """The script grading runs, kept in the episode's logs (eval.sh), if there is one."""

    def interrupt(self) -> None:
        """The run is stopping: end builds in progress at once."""

    def tools(self, task: Task, sandbox: "SandboxHandle") -> "ToolSession | None":
        """After setup: the episode's tools (`orchard_cli.tools.ToolSession`, the same object on a
        second call for the same sandbox), served to the agent through the proxy and called by a
        gold solver; None for a task without tools."""

    def release(self, task: Task, spec: "SandboxSpec") -> None:
        """The sandbox made from `spec` is gone, or was never made: free what `sandbox_spec`
        reserved for it (a set of services)."""

    def close(self) -> None:
        """The run is over: stop what the family started (services). Idempotent."""

    def use_judge(self, judge: "JudgeConfig") -> None:
        """The run has an LLM judge (`--judge-model`): a family whose own graders call one (the
        Claw-Eval checkout's) gets it here. orchard's judge score is apart from this."""

    def limits(self, task: Task) -> dict[str, float]:
        """The task's own limits on an agent episode (`timeout_seconds`, `max_turns`, `max_calls`);
        the run's own are kept where they are tighter. {} for none."""

    def near_miss(self, task: Task) -> Gold | None:
        """A plausible wrong solution, which must fail (`orchard tasks validate`); None for none."""

    def simulated_user(self, task: Task) -> SimulatedUser | None:
        """A multi-turn task's simulated user, or None. An episode of such a task runs only with
        a solver that can talk to one (`--user-model` and a harness with `multi_turn`); any
        other ends before its sandbox as `needs_user` (a category the family declares)."""


class FamilyBase:
    """Defaults for every optional hook of `TaskFamily`. Subclasses set `name` and implement
    `load`, `sandbox_spec`, `setup` and `grade`."""

    name: ClassVar[str] = ""
    categories: ClassVar[dict[str, CategoryInfo]] = {}
    grading: ClassVar[Grading] = "fresh"
    environment_error: ClassVar[tuple[type[BaseException], ...]] = ()
    suites: ClassVar[tuple[SuiteInfo, ...]] = ()

    def prompt(self, task: Task, workdir: str) -> str:
        return default_prompt(task, workdir)

    def baseline(self, task: Task, sandbox: "SandboxHandle") -> Any:
        return None

    def collect(self, task: Task, sandbox: "SandboxHandle | None", solution: Any, baseline: Any) -> Evidence:
        return solution_evidence(solution)

    def quick_verdict(self, task: Task, evidence: Evidence) -> Outcome | None:
        return None

    def gold_solution(self, task: Task) -> Gold | None:
        return None

    def env_key(self, task: Task) -> Hashable | None:
        return None

    def groups(self, task: Task) -> dict[str, str]:
        return {"repo": task.repo} if task.repo else {}

    def describe(self, task: Task) -> dict[str, Any]:
        return {"instance_id": task.task_id, "suite": task.suite, "family": task.family,
                "repo": task.repo, "problem_statement": task.problem_statement}

    def provenance(self) -> dict[str, Any]:
        return {}

    def eval_script(self, task: Task) -> str | None:
        return None

    def interrupt(self) -> None:
        return None

    def tools(self, task: Task, sandbox: "SandboxHandle") -> "ToolSession | None":
        return None

    def release(self, task: Task, spec: "SandboxSpec") -> None:
        return None

    def close(self) -> None:
        return None

    def use_judge(self, judge: "JudgeConfig") -> None:
        return None

    def limits(self, task: Task) -> dict[str, float]:
        return {}

    def near_miss(self, task: Task) -> Gold | None:
        return None

    def simulated_user(self, task: Task) -> SimulatedUser | None:
        return None
