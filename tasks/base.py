"""The task-family seam: every hook the rollout core calls on a family, declared here and only here.

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

import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.outcome import CORE_CATEGORIES, ERROR_CATEGORIES, CategoryInfo, Outcome, ordered_categories

if TYPE_CHECKING:
    from orchard_cli.env import SandboxHandle
    from orchard_cli.env.models import SandboxSpec
    from orchard_cli.judge import JudgeConfig
    from orchard_cli.tools import ToolSession

__all__ = ["CORE_CATEGORIES", "ERROR_CATEGORIES", "CategoryInfo", "Evidence", "FamilyBase", "Gold", "GoldCall",
           "Outcome", "SuiteInfo", "Task", "TaskFamily", "TaskSelection", "check_family"]

Grading = Literal["fresh", "in_place"]


class Task(BaseModel):
    """One task: an id, the family that knows it, the prompt, and the family's own record."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    suite: str
    family: str
    problem_statement: str
    repo: str = ""
    record: dict[str, Any] = Field(default_factory=dict)
    """The task's source record as loaded (for SWE: the SWE-bench instance)."""


class TaskSelection(BaseModel):
    """Which tasks: a suite (or a file) and the filters on it. One object from the CLI to the
    family's `load`; the same fields sit flat in eval's and distill's config.json."""

    model_config = ConfigDict(extra="forbid")

    suite: str
    """A registered suite name, or a data file (its family from `family`, else SWE-bench format)."""
    family: str | None = None
    """The family of a file suite (default: swe, for SWE-bench-format files)."""
    dataset: str | None = None
    """A file (or hub id) replacing the suite's own data."""
    instances: list[str] | None = None
    repo: str | None = None
    limit: int | None = Field(None, ge=0)
    slice: str | None = None
    repo_mirror: str | None = None
    """A folder of local git mirrors of the tasks' repositories (SWE)."""
    network: Literal["none", "full"] = "none"
    """What the tasks may reach beyond their own services: 'full' (`--network full`) lets the
    tasks that browse or search the live web run (the live-web suites, Claw-Eval's web_real)."""

    image_map: dict[str, str] = Field(default_factory=dict)
    """`--image-map SRC=DST`: base images a task names, mapped to ones the engine has (harbor)."""

    def filters(self) -> dict[str, Any]:
        return {"instances": self.instances, "repo": self.repo, "limit": self.limit, "slice": self.slice}


@dataclass(frozen=True)
class SuiteInfo:
    """A named suite: its family and where its tasks come from."""

    name: str
    family: str
    source: str
    """Default source: a file, or a hub dataset id (split `split`)."""
    description: str
    data_file: str | None = None
    """File name looked for in the family's data folder (ORCHARD_SWE_DATA for SWE)."""
    split: str = "test"


class SimulatedUser(BaseModel):
    """A multi-turn task's user, played by a model (`--user-model`): after each of the agent's
    turns it answers, in the role `persona` describes, or says it is done."""

    model_config = ConfigDict(extra="forbid")

    persona: str
    max_rounds: int = Field(3, ge=0)
    """Follow-up messages at most (after the task's own first message)."""
    mark: str = ""
    """Put before each follow-up as the agent receives it (Claw-Eval's `[user_agent]` line)."""


class Gold(BaseModel):
    """A task's reference solution, as data. A family that grades fresh gives the `patch`; one that
    grades in place gives `commands` run in the set-up sandbox and/or the final `answer`."""

    model_config = ConfigDict(extra="forbid")

    patch: str | None = None
    commands: list[str] = Field(default_factory=list)
    tool_calls: list["GoldCall"] = Field(default_factory=list)
    """Calls of the task's tools, in order (through `TaskFamily.tools`, recorded as dispatches)."""
    answer: str | None = None


class GoldCall(BaseModel):
    """One tool call of a gold solution."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


Gold.model_rebuild()


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
        return (f"Your working directory is {workdir}.\n\n<task>\n{task.problem_statement.strip()}\n"
                "</task>\n\nDo the task. When it is done, stop and say briefly what you did.")

    def baseline(self, task: Task, sandbox: "SandboxHandle") -> Any:
        return None

    def collect(self, task: Task, sandbox: "SandboxHandle | None", solution: Any, baseline: Any) -> Evidence:
        evidence = solution.evidence.model_copy() if solution.evidence is not None else Evidence()
        if evidence.answer is None and solution.answer is not None:
            evidence.answer = solution.answer
        return evidence

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


HOOKS = ("load", "sandbox_spec", "setup", "grade", "prompt", "baseline", "collect", "quick_verdict",
         "gold_solution", "env_key", "groups", "describe", "provenance", "eval_script", "interrupt",
         "tools", "release", "close", "limits", "use_judge", "near_miss", "simulated_user")
ATTRIBUTES = ("name", "categories", "grading", "environment_error", "suites")
_CATEGORY_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def check_family(family: Any) -> None:
    """A one-line UsageError when `family` does not implement the whole seam (it should inherit
    FamilyBase), or declares a category the core owns or a bad grading mode."""
    kind = type(family)
    missing = [h for h in HOOKS if not callable(getattr(kind, h, None))]
    missing += [a for a in ATTRIBUTES if not hasattr(family, a)]
    label = family.name if hasattr(family, "name") and family.name else kind.__name__
    if missing:
        raise UsageError(f"task family {label!r} lacks {', '.join(missing)}",
                         hint="inherit orchard_cli.tasks.base.FamilyBase, which has every optional hook")
    if family.grading not in ("fresh", "in_place"):
        raise UsageError(f"task family {label!r}: grading must be 'fresh' or 'in_place', not {family.grading!r}")
    clash = [c for c in family.categories if c in CORE_CATEGORIES or not _CATEGORY_NAME.fullmatch(c)]
    if clash:
        raise UsageError(f"task family {label!r} declares category {clash[0]!r}, which is a core "
                         "category or not a lower_snake_case name")
    if issubclass(kind, FamilyBase) and kind.simulated_user is not FamilyBase.simulated_user \
            and "needs_user" not in family.categories:
        raise UsageError(f"task family {label!r} has simulated users but does not declare the category "
                         "'needs_user' (what its multi-turn tasks count as without one)")


def family_categories(family: Any) -> dict[str, CategoryInfo]:
    """Every category a family's outcomes can take, in display order."""
    return ordered_categories(family.categories)
