"""The adapter from the version-1 family seam (the 22 hooks of `orchard_cli.tasks.base.FamilyBase`)
to the version-2 one (`orchard_cli.family`: `Family` + `EpisodeEnv`).

A family written against version 1 keeps working: `families.load_family` wraps it in `V1Family`,
whose episodes (`V1Episode`) call the old `(task, sandbox)` hooks and keep what the old seam kept
on the family (the spec to release, the baseline, the sandbox for `tools`) on the episode. A
third-party family gets a one-line deprecation note on stderr, once per process; version 1 stays
supported for at least one release (docs/families.md, "What changed in version 2").
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import EnvironmentUnavailable, OrchardError, UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.family import Gold, Requirements, RunOptions, SimulatedUser, Suite, SuiteInfo, Task
from orchard_cli.outcome import CORE_CATEGORIES, REQUIREMENT_CATEGORIES, EpisodeFailure, Outcome
from orchard_cli.selection import Source, TaskSelection

HOOKS = ("load", "sandbox_spec", "setup", "grade", "prompt", "baseline", "collect", "quick_verdict",
         "gold_solution", "env_key", "groups", "describe", "provenance", "eval_script", "interrupt",
         "tools", "release", "close", "limits", "use_judge", "near_miss", "simulated_user")
ATTRIBUTES = ("name", "categories", "grading", "environment_error", "suites")
_CATEGORY_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_warned: set[str] = set()


class SelectionV1(BaseModel):
    """What a version-1 family's `load(selection, suite)` reads (the old flat selection)."""

    model_config = ConfigDict(extra="forbid")

    suite: str
    family: str | None = None
    dataset: str | None = None
    instances: list[str] | None = None
    repo: str | None = None
    limit: int | None = Field(None, ge=0)
    slice: str | None = None
    repo_mirror: str | None = None
    network: Literal["none", "full"] = "none"
    image_map: dict[str, str] = Field(default_factory=dict)

    def filters(self) -> dict[str, Any]:
        return {"instances": self.instances, "repo": self.repo, "limit": self.limit, "slice": self.slice}


def is_v1(family: Any) -> bool:
    """A version-1 family object: it has the old hooks and no `episode`."""
    return callable(getattr(type(family), "sandbox_spec", None)) and not callable(getattr(family, "episode", None))


def adapt(family: Any) -> Any:
    """`family` as a version-2 Family: itself, or a version-1 one in the adapter."""
    return V1Family(family) if is_v1(family) else family


def check_v1(family: Any) -> None:
    """A one-line UsageError when a version-1 family lacks a hook (it should inherit FamilyBase),
    declares a category the core owns, or a bad grading mode."""
    kind = type(family)
    missing = [h for h in HOOKS if not callable(getattr(kind, h, None))]
    missing += [a for a in ATTRIBUTES if not hasattr(family, a)]
    label = family.name if getattr(family, "name", "") else kind.__name__
    if missing:
        raise UsageError(f"task family {label!r} lacks {', '.join(missing)}",
                         hint="inherit orchard_cli.tasks.base.FamilyBase, which has every optional hook")
    if family.grading not in ("fresh", "in_place"):
        raise UsageError(f"task family {label!r}: grading must be 'fresh' or 'in_place', not {family.grading!r}")
    clash = [c for c in family.categories if c in CORE_CATEGORIES or not _CATEGORY_NAME.fullmatch(c)]
    if clash:
        raise UsageError(f"task family {label!r} declares category {clash[0]!r}, which is a core "
                         "category or not a lower_snake_case name")
    simulated = getattr(kind, "simulated_user", None)
    base = next((k for k in kind.__mro__ if k.__name__ == "FamilyBase"), None)
    if base is not None and simulated is not getattr(base, "simulated_user", None) \
            and "needs_user" not in family.categories:
        raise UsageError(f"task family {label!r} has simulated users but does not declare the category "
                         "'needs_user' (what its multi-turn tasks count as without one)")


def deprecation(name: str) -> None:
    """One line on stderr, once per process and family."""
    if name in _warned:
        return
    _warned.add(name)
    print(f"orchard: task family {name!r} uses the version-1 seam (FamilyBase hooks); it runs through an "
          "adapter that a later release removes: see docs/families.md, 'What changed in version 2'",
          file=sys.stderr)


_OWN = frozenset({"legacy", "name", "suites", "grading", "categories", "requirement_labels", "environment_error",
                  "_judged"})
"""V1Family's own attributes (anything else set on it goes to the version-1 family)."""


class V1Family:
    """A version-1 family as a version-2 `Family`."""

    def __init__(self, legacy: Any) -> None:
        check_v1(legacy)
        self.legacy = legacy
        self.name: str = legacy.name
        self.suites: tuple[SuiteInfo, ...] = tuple(legacy.suites)
        self.grading = legacy.grading
        self.categories = {k: v for k, v in legacy.categories.items() if k not in REQUIREMENT_CATEGORIES}
        self.requirement_labels = {k: v for k, v in legacy.categories.items() if k in REQUIREMENT_CATEGORIES}
        """Its own labels for the requirement categories it declared (SWE's "tests need the
        internet", live-web's "not judged yet"): its scorecards show what they showed before."""
        self.environment_error: tuple[type[BaseException], ...] = tuple(legacy.environment_error)
        self._judged = False

    def load(self, info: SuiteInfo, source: Source) -> Suite:
        return self.load_v1(info, TaskSelection(suite=info.name, dataset=source.dataset, repo_mirror=source.repo_mirror,
                                                image_map=dict(source.image_map)), RunOptions())

    def load_v1(self, info: SuiteInfo, selection: TaskSelection, options: RunOptions) -> Suite:
        """The old `load` with the run's network (version-1 families read it there) and the ids
        named (MiniWoB's named real-time tasks); the core applies the other filters."""
        old = SelectionV1(suite=selection.suite, family=selection.family, dataset=selection.dataset,
                          instances=selection.instances, repo_mirror=selection.repo_mirror or options.repo_mirror,
                          network=options.network, image_map=selection.image_map)
        tasks = self.legacy.load(old, info)
        if options.judge is not None and not self._judged:
            self.legacy.use_judge(options.judge)
            self._judged = True
        return Suite(info=info, tasks=tasks, provenance=dict(self.legacy.provenance() or {}))

    def groups(self, task: Task) -> dict[str, str]:
        return self.legacy.groups(task)

    def describe(self, task: Task) -> dict[str, Any]:
        return self.legacy.describe(task)

    def env_key(self, task: Task) -> Any:
        return self.legacy.env_key(task)

    def episode(self, task: Task, options: RunOptions) -> "V1Episode":
        if options.judge is not None and not self._judged:
            self.legacy.use_judge(options.judge)
            self._judged = True
        return V1Episode(self, task, options)

    def close(self, *, interrupted: bool = False) -> None:
        if interrupted:
            self.legacy.interrupt()
        else:
            self.legacy.close()

    def __getattr__(self, name: str) -> Any:
        """The family's own members (`gold_patch`, `repository`, ...), for code written against it."""
        if name == "legacy":
            raise AttributeError(name)
        return getattr(self.legacy, name)

    def __setattr__(self, name: str, value: Any) -> None:
        """Setting one of the family's own settings (`repo_mirror`, `test_timeout`, `network`)
        sets it on the family, whose hooks read it; the adapter's own members stay here."""
        if name in _OWN or "legacy" not in self.__dict__ or not hasattr(self.legacy, name):
            object.__setattr__(self, name, value)
        else:
            setattr(self.legacy, name, value)


class V1Episode:
    """One episode of a version-1 family: the hooks called with the task, the episode's state here."""

    def __init__(self, family: V1Family, task: Task, options: RunOptions) -> None:
        self.family, self.legacy, self.task, self.options = family, family.legacy, task, options
        self.user: SimulatedUser | None = self.legacy.simulated_user(task)
        self.requires = Requirements(user=self.user is not None)
        self._specs: list[Any] = []
        self._sandbox: Any = None
        self._baseline: Any = None

    @property
    def limits(self) -> dict[str, float]:
        return self.legacy.limits(self.task)

    def __enter__(self) -> "V1Episode":
        return self

    def __exit__(self, *exc: object) -> None:
        self._give_back()

    def _give_back(self) -> None:
        specs, self._specs = self._specs, []
        for spec in specs:
            try:
                self.legacy.release(self.task, spec)
            except Exception:  # the family's own housekeeping; the verdict stands
                pass

    @contextmanager
    def _environment(self) -> Iterator[None]:
        """The family's `environment_error` becomes the core's EnvironmentUnavailable (env_error)."""
        errors = self.family.environment_error
        try:
            yield
        except EpisodeFailure:
            raise
        except Exception as exc:
            if errors and isinstance(exc, errors) and not isinstance(exc, EnvironmentUnavailable):
                text = exc.message if isinstance(exc, OrchardError) else f"{type(exc).__name__}: {exc}"
                raise EnvironmentUnavailable(text) from exc
            raise

    def spec(self, backend: str) -> Any:
        """The family's `sandbox_spec`; what earlier specs reserved is given back first (their
        sandbox is gone by the time the core asks for another: the grading sandbox's), as the
        version-1 core did, so an episode never holds two leases of a pool sized to --workers."""
        self._give_back()
        with self._environment():
            spec = self.legacy.sandbox_spec(self.task, backend)
        self._specs.append(spec)
        return spec

    def setup(self, sandbox: Any, *, for_grading: bool = False) -> None:
        with self._environment():
            self.legacy.setup(self.task, sandbox)
        if for_grading:
            return
        self._sandbox = sandbox
        from orchard_cli.rollout.failures import phase

        with phase("infra_error", "reading the workspace before the attempt", self.family.environment_error):
            self._baseline = self.legacy.baseline(self.task, sandbox)

    def prompt(self, workdir: str) -> str:
        return self.legacy.prompt(self.task, workdir)

    def tools(self) -> Any:
        if self._sandbox is None:
            return None
        with self._environment():
            return self.legacy.tools(self.task, self._sandbox)

    def collect(self, solution: Any, sandbox: Any) -> Evidence:
        with self._environment():
            return self.legacy.collect(self.task, sandbox, solution, self._baseline if sandbox is not None else None)

    def grade(self, evidence: Evidence, sandbox: Any) -> Outcome | None:
        with self._environment():
            quick = self.legacy.quick_verdict(self.task, evidence)
            if quick is not None or sandbox is None:
                return quick
            return self.legacy.grade(self.task, evidence, sandbox)

    def reference(self, kind: str) -> Gold | None:
        return self.legacy.gold_solution(self.task) if kind == "gold" else self.legacy.near_miss(self.task)

    def eval_script(self) -> str | None:
        return self.legacy.eval_script(self.task)
