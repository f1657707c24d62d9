"""The task-family seam (version 2): a `Family` that lives for the run, and an `EpisodeEnv` per episode.

    family   = families.load_family("calc")                       # the catalogue
    suite    = family.load(info, source)                          # every task, provenance
    tasks    = selection.apply(suite.tasks, family.groups, ...)   # the core filters, once
    with family.episode(task, options) as env:                    # one episode's state, released on exit
        env.requires                          # checked by the core before any sandbox
        spec = env.spec(backend); sandbox = create(spec); env.setup(sandbox)
        solution = solver.solve(...)          # env.prompt, env.limits, env.tools(), env.user
        evidence = env.collect(solution, sandbox)
        outcome  = env.grade(evidence, sandbox)   # grading="fresh": a new sandbox, set up for grading
    family.close()

A `Family` is a catalogue (what tasks there are, how they group, how to describe them) and a
factory of episodes; it keeps nothing per episode. An `EpisodeEnv` owns everything one episode
needs (what it reserved, its tool session, its baseline) and gives it back in `__exit__`. Run
options (`RunOptions`: network, judge, backend) are handed to `episode`, never captured by `load`.
What the core decides is declared in the core: the requirement categories (`needs_network`,
`needs_judge`, `needs_user`, `needs_data`) in `orchard_cli.outcome`, host programs in
`orchard_cli.prereqs`, the task selection in `orchard_cli.selection`.

Families that implement the version-1 hooks (`orchard_cli.tasks.base.FamilyBase`) run through an
adapter (`orchard_cli.seam_v1`), with a one-line deprecation note; docs/families.md says what changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.scoring.rubric_judge import JudgeConfig
from orchard_cli.outcome import CORE_CATEGORIES, REQUIREMENT_CATEGORIES, CategoryInfo, EpisodeFailure, Outcome
from orchard_cli.selection import Source, TaskSelection

if TYPE_CHECKING:
    from orchard_cli.env import SandboxHandle
    from orchard_cli.env.models import SandboxSpec
    from orchard_cli.tools import ToolSession

SEAM_VERSION = 2
Grading = Literal["fresh", "in_place"]
ReferenceKind = Literal["gold", "near_miss"]

__all__ = ["SEAM_VERSION", "BaseEpisode", "BaseFamily", "EpisodeEnv", "Family", "Gold", "GoldCall", "Requirements",
           "RunOptions", "SimulatedUser", "Source", "Suite", "SuiteInfo", "Task", "TaskSelection", "check_family",
           "family_categories"]


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


@dataclass
class Suite:
    """A loaded suite: every task of it (the core selects), and where they came from."""

    info: SuiteInfo
    tasks: list[Task]
    provenance: dict[str, Any] = field(default_factory=dict)
    """For the scorecard: `dataset_sha256`, a checkout's commit, ..."""
    unlisted: frozenset[str] = frozenset()
    """Task ids left out unless named by id (`--instances`): MiniWoB's real-time tasks."""


class SimulatedUser(BaseModel):
    """A multi-turn task's user, played by a model (`--user-model`): after each of the agent's
    turns it answers, in the role `persona` describes, or says it is done."""

    model_config = ConfigDict(extra="forbid")

    persona: str
    max_rounds: int = Field(3, ge=0)
    """Follow-up messages at most (after the task's own first message)."""
    mark: str = ""
    """Put before each follow-up as the agent receives it (Claw-Eval's `[user_agent]` line)."""


class GoldCall(BaseModel):
    """One tool call of a reference solution."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Gold(BaseModel):
    """A reference solution, as data: the `patch` (graded fresh), or `commands` run in the set-up
    sandbox, `tool_calls` through the episode's tools and/or the final `answer` (graded in place)."""

    model_config = ConfigDict(extra="forbid")

    patch: str | None = None
    commands: list[str] = Field(default_factory=list)
    tool_calls: list[GoldCall] = Field(default_factory=list)
    answer: str | None = None


class RunOptions(BaseModel):
    """What the run allows and brings, handed to every episode (never captured by `load`)."""

    model_config = ConfigDict(extra="forbid")

    backend: str = "local"
    network: Literal["none", "full"] = "none"
    """'full' (`--network full`): tasks that browse or search the live web may run."""
    judge: JudgeConfig | None = None
    """The run's LLM judge (`--judge-model`), for families whose own graders call one."""
    user: bool = False
    """A simulated user answers this run's agents (`--user-model` and a multi-turn harness)."""
    repo_mirror: str | None = None
    """A folder of local git mirrors of the tasks' repositories (SWE)."""


class Requirements(BaseModel):
    """What an episode needs beyond a sandbox, checked by the core before any sandbox exists."""

    model_config = ConfigDict(extra="forbid")

    network: bool = False
    """It reaches the live web: runs only with `--network full` (else `needs_network`)."""
    judge: bool = False
    """Its grader calls an LLM judge: runs only with `--judge-model` (else `needs_judge`)."""
    user: bool = False
    """A simulated user answers it: runs only with one (else `needs_user`)."""
    missing_data: list[str] = Field(default_factory=list)
    """Files the task needs that are not there (else it runs): `needs_data`."""
    host: list[str] = Field(default_factory=list)
    """Programs this machine must have (names in `orchard_cli.prereqs.PREREQS`): checked once
    per run, before anything is written; a missing one is a one-line error with its install."""
    reasons: dict[str, str] = Field(default_factory=dict)
    """The family's own words for an unmet requirement, by category (Claw-Eval names the service
    that searches the web); the core's otherwise. The core still decides whether it is met."""

    def unmet(self, options: RunOptions, *, talks_to_users: bool) -> EpisodeFailure | None:
        """Why an episode cannot run with these options (a requirement category), or None."""
        # the user first (the solver holds the user model, --user-model): the version-1 core checked it
        # before the family's own requirements, and a multi-turn task's verdict stays what it was
        if self.user and not talks_to_users:
            return self._failure("needs_user", "a multi-turn task: it needs a simulated user (--user-model) "
                                               "and a harness that continues a conversation")
        if self.network and options.network != "full":
            return self._failure("needs_network", "it reaches the live web: run with --network full")
        if self.missing_data:
            return self._failure("needs_data", f"missing: {', '.join(self.missing_data[:5])}")
        if self.judge and options.judge is None:
            return self._failure("needs_judge", "its grader calls an LLM judge: give --judge-model and "
                                                "--judge-base-url")
        return None

    def _failure(self, category: str, reason: str) -> EpisodeFailure:
        return EpisodeFailure(category, self.reasons.get(category) or reason)


@runtime_checkable
class EpisodeEnv(Protocol):
    """One episode of one task: a context manager that owns the episode's state. Made by
    `Family.episode` (cheaply: nothing is reserved before `spec`), left by the core after the
    verdict; `__exit__` gives back what `spec` reserved and closes what `setup` opened."""

    task: Task
    requires: Requirements
    limits: dict[str, float]
    """The task's own limits on an agent (`timeout_seconds`, `max_turns`, `max_calls`); the run's
    are kept where they are tighter. {} for none."""
    user: SimulatedUser | None
    """A multi-turn task's simulated user, or None."""

    def __enter__(self) -> "EpisodeEnv": ...

    def __exit__(self, *exc: object) -> None: ...

    def spec(self, backend: str) -> "SandboxSpec":
        """The sandbox this episode runs in (reserving what it needs: a leased service set)."""

    def setup(self, sandbox: "SandboxHandle", *, for_grading: bool = False) -> None:
        """Prepare `sandbox` for the task (raise `EnvironmentUnavailable` when it cannot be). The
        episode's own sandbox first; with `for_grading`, a fresh one to grade in."""

    def prompt(self, workdir: str) -> str:
        """The task as a user would give it to an agent working in `workdir`."""

    def tools(self) -> "ToolSession | None":
        """After setup: the episode's tools (the same session on every call), or None."""

    def collect(self, solution: Any, sandbox: "SandboxHandle | None") -> Evidence:
        """What the grader reads, from the episode's sandbox before it goes (None for a solver
        that works without one) and from what the solver handed over (`solution.evidence`,
        `solution.answer`)."""

    def grade(self, evidence: Evidence, sandbox: "SandboxHandle | None") -> Outcome | None:
        """The verdict. With `sandbox` None: the verdict that needs no sandbox (an empty patch,
        a verdict read from the evidence alone), or None when a sandbox is needed. Reads the
        episode's state from `evidence` only, so `orchard eval regrade` grades stored evidence."""

    def reference(self, kind: ReferenceKind) -> Gold | None:
        """The reference solution (`gold`) or a plausible wrong one (`near_miss`); None for none."""

    def eval_script(self) -> str | None:
        """The script grading ran, kept in the episode's logs (eval.sh), if there is one."""


@runtime_checkable
class Family(Protocol):
    """A kind of work: the catalogue of its tasks and the factory of their episodes."""

    name: str
    suites: tuple[SuiteInfo, ...]
    categories: dict[str, CategoryInfo]
    """Outcome categories of the family's own, beside the core's (SWE: empty_patch, ...)."""
    grading: Grading
    """'fresh': graded in a new sandbox set up for the task (SWE-bench's rule); 'in_place': in the
    episode's own sandbox, before it goes (state that lives there: services, a browser)."""

    def load(self, info: SuiteInfo, source: Source) -> Suite:
        """Every task of the suite (from `source.dataset` when given); the core selects."""

    def groups(self, task: Task) -> dict[str, str]:
        """The task's groupings ({'repo': 'acme/calc'}): scorecard rows, `--group`, `--sample`."""

    def describe(self, task: Task) -> dict[str, Any]:
        """`orchard tasks show`: the task's fields for a person or a script (`judge_rubric`,
        when present, is what the rubric judge grades against)."""

    def env_key(self, task: Task) -> Any:
        """Tasks with the same key share an environment build; parallel workers start on
        different keys. None for a task without one."""

    def episode(self, task: Task, options: RunOptions) -> EpisodeEnv:
        """A new episode of `task` under the run's options."""

    def close(self, *, interrupted: bool = False) -> None:
        """The run is over (or, interrupted, stopping: end builds in progress and refuse new
        reservations at once). Idempotent; a later run of the family starts afresh."""


def default_prompt(task: Task, workdir: str) -> str:
    """A task as an agent gets it where its family says nothing else: the folder, the statement."""
    return (f"Your working directory is {workdir}.\n\n<task>\n{task.problem_statement.strip()}\n"
            "</task>\n\nDo the task. When it is done, stop and say briefly what you did.")


def solution_evidence(solution: Any) -> Evidence:
    """What a solver left (its evidence, with its final answer), where a family reads nothing more."""
    evidence = solution.evidence.model_copy() if solution.evidence is not None else Evidence()
    if evidence.answer is None and solution.answer is not None:
        evidence.answer = solution.answer
    return evidence


class BaseEpisode:
    """Defaults for the optional members of `EpisodeEnv`; a family's episode sets `task` and
    implements `spec`, `setup` and `grade`."""

    requires: Requirements = Requirements()
    limits: dict[str, float] = {}
    user: SimulatedUser | None = None

    def __init__(self, task: Task, options: RunOptions) -> None:
        self.task, self.options = task, options

    def __enter__(self) -> "BaseEpisode":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def prompt(self, workdir: str) -> str:
        return default_prompt(self.task, workdir)

    def tools(self) -> "ToolSession | None":
        return None

    def collect(self, solution: Any, sandbox: "SandboxHandle | None") -> Evidence:
        return solution_evidence(solution)

    def reference(self, kind: ReferenceKind) -> Gold | None:
        return None

    def eval_script(self) -> str | None:
        return None


class BaseFamily:
    """Defaults for the optional members of `Family`; a family sets `name`, `suites` and its
    episode class, and implements `load`."""

    name: ClassVar[str] = ""
    suites: ClassVar[tuple[SuiteInfo, ...]] = ()
    categories: ClassVar[dict[str, CategoryInfo]] = {}
    grading: ClassVar[Grading] = "fresh"
    harness: ClassVar[str] = "bash"
    """The harness a run uses when it names none (`--harness`): the one the family's tasks are
    made for (quiz: chat, one call and no tools; the browser families: web; else bash, orchard's
    tool-using agent). Optional: a family without it gets bash."""

    def groups(self, task: Task) -> dict[str, str]:
        return {"repo": task.repo} if task.repo else {}

    def describe(self, task: Task) -> dict[str, Any]:
        return {"instance_id": task.task_id, "suite": task.suite, "family": task.family,
                "repo": task.repo, "problem_statement": task.problem_statement}

    def env_key(self, task: Task) -> Any:
        return None

    def close(self, *, interrupted: bool = False) -> None:
        return None


FAMILY_MEMBERS = ("name", "suites", "categories", "grading", "load", "groups", "describe", "env_key",
                  "episode", "close")
_CATEGORY_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def check_family(family: Any) -> None:
    """A one-line UsageError when `family` lacks a member of the seam, declares a category the
    core owns or one that is not lower_snake_case, or a bad grading mode."""
    label = getattr(family, "name", "") or type(family).__name__
    missing = [m for m in FAMILY_MEMBERS if not hasattr(family, m)]
    if missing:
        raise UsageError(f"task family {label!r} lacks {', '.join(missing)}",
                         hint="see docs/families.md (orchard_cli.family.BaseFamily has the defaults)")
    if family.grading not in ("fresh", "in_place"):
        raise UsageError(f"task family {label!r}: grading must be 'fresh' or 'in_place', not {family.grading!r}")
    clash = [c for c in family.categories
             if c in CORE_CATEGORIES or c in REQUIREMENT_CATEGORIES or not _CATEGORY_NAME.fullmatch(c)]
    if clash:
        raise UsageError(f"task family {label!r} declares category {clash[0]!r}, which is a core "
                         "category or not a lower_snake_case name")


def family_categories(family: Any) -> dict[str, CategoryInfo]:
    """The family's categories in display order (the core's first and last; requirement
    categories show where a run has them, except those a version-1 family labelled itself:
    `requirement_labels`, kept as they were)."""
    from orchard_cli.outcome import ordered_categories

    return ordered_categories({**family.categories, **getattr(family, "requirement_labels", {})})
