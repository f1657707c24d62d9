"""Which tasks a run takes: one `TaskSelection`, applied once by the core to every family's tasks.

A family's `load` returns every task of a suite; `TaskSelection.apply` then keeps, in the data's
order:

    instances      the ids named (unknown ids are an error); without them, every task but the
                   suite's `unlisted` ones (MiniWoB's real-time tasks run only when named)
    repo           tasks of that repository (`--repo`, SWE's alias of `--group repo=VALUE`; the
                   name alone works too: `--repo flask`)
    groups         tasks whose family groupings hold, for every KEY, one of its VALUEs
                   (`--group category=mail --group category=todo --group difficulty=easy`); a KEY
                   the family's tasks lack is an error listing the ones they have
    slice          A:B of what is left (a Python slice)
    sample         N tasks spread evenly over the family's groupings (seeded by `sample_seed`)
    limit          the first N

The same model is `config.json`'s `selection` block in eval, distill, rollout and rl.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchard_cli.errors import UsageError
from orchard_cli.registry import did_you_mean

SELECTION_FIELDS = ("suite", "family", "dataset", "repo_mirror", "image_map", "instances", "repo", "groups",
                    "limit", "slice", "sample", "sample_seed")


class Source(BaseModel):
    """Where a suite's tasks are read from: its own data, or what the user named instead."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str | None = None
    """A file, folder or hub id replacing the suite's own data (`--dataset`)."""
    repo_mirror: str | None = None
    """A folder of local git mirrors of the tasks' repositories (SWE, `--repo-mirror`)."""
    image_map: dict[str, str] = Field(default_factory=dict)
    """`--image-map SRC=DST`: base images a task names, mapped to ones the engine has (harbor)."""


class SelectionFields(BaseModel):
    """The selection as a run's config.json records it, flat beside the run's other fields
    (eval's and distill's configs); `selection` is the `TaskSelection` they make."""

    suite: str
    family: str | None = None
    """The family of a file suite (`--family`); None for a registered suite or a SWE-bench file."""
    dataset: str | None = None
    instances: list[str] | None = None
    repo: str | None = None
    groups: dict[str, list[str]] | None = None
    """`--group KEY=VALUE` (repeatable): only tasks of these family groupings."""
    limit: int | None = None
    slice: str | None = None
    sample: int | None = Field(None, ge=1)
    """`--sample N`: N tasks spread over the family's groupings, seeded by `sample_seed`."""
    sample_seed: int = 0
    repo_mirror: str | None = None
    image_map: dict[str, str] = Field(default_factory=dict)
    """`--image-map SRC=DST`: a base image a task names, replaced by one the engine has (harbor)."""

    @property
    def selection(self) -> TaskSelection:
        return TaskSelection(suite=self.suite, family=self.family, dataset=self.dataset,
                             instances=self.instances, repo=self.repo, groups=self.groups, limit=self.limit,
                             slice=self.slice, sample=self.sample, sample_seed=self.sample_seed,
                             repo_mirror=self.repo_mirror, image_map=self.image_map)


class TaskSelection(BaseModel):
    """A suite (or a data file) and the filters on its tasks."""

    model_config = ConfigDict(extra="forbid")

    suite: str
    """A registered suite name, or a data file (its family from `family`, else SWE-bench format)."""
    family: str | None = None
    """The family of a file suite (default: swe, for SWE-bench-format files)."""
    dataset: str | None = None
    """A file (or hub id, or folder) replacing the suite's own data."""
    repo_mirror: str | None = None
    """A folder of local git mirrors of the tasks' repositories (SWE)."""
    image_map: dict[str, str] = Field(default_factory=dict)
    """`--image-map SRC=DST`: base images a task names, mapped to ones the engine has (harbor)."""
    instances: list[str] | None = None
    repo: str | None = None
    groups: dict[str, list[str]] | None = None
    """KEY -> VALUEs: only tasks whose family grouping KEY is one of VALUEs, for every KEY
    (`--group KEY=VALUE`, repeatable)."""
    limit: int | None = Field(None, ge=0)
    slice: str | None = None
    sample: int | None = Field(None, ge=1)
    """N tasks spread evenly over the family's groupings (`--sample N`)."""
    sample_seed: int = 0
    """The seed of `sample` (`--sample-seed`): the same seed, the same tasks."""

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        """A selection written before `network` moved to the run's options (rl configs)."""
        if isinstance(data, dict) and data.get("network", "none") == "none" and "network" in data:
            data = {k: v for k, v in data.items() if k != "network"}
        if isinstance(data, dict) and isinstance(data.get("groups"), dict):  # {KEY: VALUE}, as step 1 wrote it
            data = {**data, "groups": {k: [v] if isinstance(v, str) else v for k, v in data["groups"].items()}}
        return data

    def stable_dump(self) -> dict[str, Any]:
        """The selection as runs from before `groups` and `sample` (and with `network` beside
        the filters) recorded it, plus the newer fields that are set: for fingerprints."""
        data = self.model_dump(mode="json")
        newer = {k: data.pop(k) for k in ("groups", "sample", "sample_seed")}
        data["network"] = "none"
        data.update({k: v for k, v in newer.items() if v not in (None, 0)})
        return data

    @property
    def source(self) -> Source:
        return Source(dataset=self.dataset, repo_mirror=self.repo_mirror, image_map=self.image_map)

    def unfiltered(self) -> "TaskSelection":
        """The same suite and data, every task."""
        return self.model_copy(update={"instances": None, "repo": None, "groups": None, "limit": None,
                                       "slice": None, "sample": None})

    def apply(self, tasks: list[Any], groups: Callable[[Any], dict[str, str]],
              unlisted: Iterable[str] = ()) -> list[Any]:
        """The tasks this selection keeps, in the data's order; a filter that matches nothing is a
        one-line UsageError naming what there is."""
        if self.instances:
            wanted = list(dict.fromkeys(self.instances))
            known = {t.task_id for t in tasks}
            unknown = [i for i in wanted if i not in known]
            if unknown:
                shown = ", ".join(unknown[:5]) + (f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else "")
                raise UsageError(f"unknown instance id(s): {shown}", hint="list them with `orchard tasks ls SUITE`")
            chosen = set(wanted)
            tasks = [t for t in tasks if t.task_id in chosen]
        else:
            hidden = set(unlisted)
            tasks = [t for t in tasks if t.task_id not in hidden]
        if self.repo:
            names = sorted({t.repo for t in tasks if t.repo} or {v for t in tasks for v in groups(t).values()})
            tasks = [t for t in tasks if _of_repo(t, groups(t), self.repo)]
            if not tasks:
                raise UsageError(f"no instance of repository {self.repo!r}",
                                 hint=f"repositories here: {', '.join(names) or '(none)'}")
        if self.groups:
            known = sorted({k for t in tasks for k in groups(t)} | ({"repo"} if any(t.repo for t in tasks) else set()))
            for key in self.groups:
                if key not in known:
                    family = tasks[0].family if tasks else "this"
                    raise UsageError(f"--group {key}=...: the {family} family's tasks have no grouping {key!r}"
                                     f"{did_you_mean(key, known)}; keys: {', '.join(known) or '(none)'}")
        for key, wanted in (self.groups or {}).items():
            values = sorted({_group(t, groups(t), key) for t in tasks} - {None})
            missing = [v for v in wanted if v not in values]
            if missing:
                raise UsageError(f"no task in group {key}={missing[0]}{did_you_mean(missing[0], values)}",
                                 hint=f"values of {key} here: {', '.join(values) or '(none)'}")
            tasks = [t for t in tasks if _group(t, groups(t), key) in wanted]
        if self.slice:
            tasks = tasks[parse_slice(self.slice)]
        if self.sample is not None:
            tasks = stratified(tasks, groups, self.sample, self.sample_seed)
        if self.limit is not None:
            tasks = tasks[: self.limit]
        return tasks


def _group(task: Any, found: dict[str, str], key: str) -> str | None:
    return found.get(key) if key in found else (task.repo or None) if key == "repo" else None


def _of_repo(task: Any, found: dict[str, str], repo: str) -> bool:
    """`--repo` as it always matched: the repository (or its name alone); for families whose
    tasks have no repository, a grouping's value (`--repo claw/mail` or `--repo mail`)."""
    last = repo.split("/")[-1]
    if task.repo:
        return task.repo == repo or task.repo.split("/")[-1] == repo
    return any(v in (repo, last) for v in found.values()) or repo == task.family


def stratified(tasks: list[Any], groups: Callable[[Any], dict[str, str]], n: int, seed: int) -> list[Any]:
    """`n` tasks spread over the strata of the family's groupings: each stratum shuffled by `seed`,
    then taken in turn (strata in a seeded order) until `n`; returned in the data's order."""
    strata: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for index, task in enumerate(tasks):
        strata.setdefault(tuple(sorted(groups(task).items())), []).append(index)
    rng = random.Random(seed)
    order = sorted(strata)
    rng.shuffle(order)
    queues = []
    for key in order:
        members = list(strata[key])
        rng.shuffle(members)
        queues.append(members)
    picked: list[int] = []
    depth = max((len(q) for q in queues), default=0)
    for i in range(depth):
        for queue in queues:
            if i < len(queue) and len(picked) < n:
                picked.append(queue[i])
    return [tasks[i] for i in sorted(picked)]


def parse_slice(text: str) -> slice:
    """'10:20', ':5', '3:' -> a slice; anything else is a usage error."""
    parts = text.split(":")
    try:
        if len(parts) in (2, 3):
            return slice(*(int(p) if p.strip() else None for p in parts))
    except ValueError:
        pass
    raise UsageError(f"bad --slice {text!r}; use START:STOP such as 0:50")


def parse_groups(values: list[str] | None) -> dict[str, list[str]] | None:
    """`--group KEY=VALUE` (repeatable) -> {KEY: [VALUE, ...]}: several values of one key are any
    of them, different keys all of them; a value without '=' is a usage error."""
    if not values:
        return None
    found: dict[str, list[str]] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UsageError(f"--group {item!r} is not KEY=VALUE (for example --group category=mail)")
        chosen = found.setdefault(key.strip(), [])
        if value.strip() not in chosen:
            chosen.append(value.strip())
    return found
