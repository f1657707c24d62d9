"""The task registry: families by name, the suites they declare, and `open_suite`, where every
command's tasks come from (one selection, applied once, here).

`families` maps a family name to "module:attr" (the core imports no family until one is named):
orchard's own, and third-party ones from the entry-point group `orchard.tasks`. Each family class
declares its suites (`Family.suites`); `find_suite(name)` looks through them.

A data file works as a suite too: `--family NAME` says whose format it is (default: a
SWE-bench-format file, `.parquet`, `.jsonl`, `.json`); a folder of task folders is claw's, or
web's when its first task.yaml names `sites`, or harbor's when it holds Harbor's task.toml.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from orchard_cli.errors import OrchardError, UnknownNameError, UsageError
from orchard_cli.family import Family, RunOptions, Suite, SuiteInfo, Task, check_family
from orchard_cli.registry import Registry, did_you_mean
from orchard_cli.selection import TaskSelection

BUILTIN = {
    "swe": "orchard_cli.tasks.swe.family:SWEFamily",
    "calc": "orchard_cli.tasks.calc:CalcFamily",
    "claw": "orchard_cli.tasks.claw.family:ClawFamily",
    "claw-eval": "orchard_cli.tasks.claw_eval.family:ClawEvalFamily",
    "web": "orchard_cli.tasks.web.family:WebFamily",
    "live-web": "orchard_cli.tasks.live_web.family:LiveWebFamily",
    "miniwob": "orchard_cli.tasks.miniwob.family:MiniwobFamily",
    "quiz": "orchard_cli.tasks.quiz:QuizFamily",
    "harbor": "orchard_cli.tasks.harbor.family:HarborFamily",
}
families: Registry = Registry("task family", "orchard.tasks", BUILTIN)

FILE_SUFFIXES = (".parquet", ".jsonl", ".json")
FILE_FAMILY = "swe"
"""The family of a data file given without --family: SWE-bench's instance format."""
FOLDER_FAMILY = "claw"
"""The family of a folder of task folders given without --family (claw's task.yaml format),
unless its first task.yaml is a web task's (it names `sites`), or it holds Harbor's task.toml."""
HARBOR_MARKER = "task.toml"


def folder_family(folder: Path) -> str:
    """The family of a folder of task folders: harbor (task.toml), else from its first task.yaml:
    web or claw."""
    from orchard_cli.tasks.kit.taskfiles import TaskFiles, task_folders

    try:
        if task_folders(folder, HARBOR_MARKER) and not task_folders(folder):
            return "harbor"
    except (OrchardError, OSError):
        pass
    try:  # through the guarded loader: a link out of the folder or a FIFO is refused at load, not read here
        found = task_folders(folder)[:1]
        head = TaskFiles(found[0].name, found[0]).read_text("task.yaml", limit=4 << 20) if found else ""
    except (OrchardError, OSError):
        head = ""
    return "web" if any(line.startswith("sites:") for line in head.splitlines()) else FOLDER_FAMILY


def load_family(name: str) -> Family:
    """A new instance of the family called `name`, checked against the seam. A version-1 family
    (the old hooks) comes wrapped in the adapter; a third-party one says so once on stderr."""
    from orchard_cli.seam_v1 import V1Family, deprecation, is_v1

    family = families.load(name)()
    if is_v1(family):
        if name not in BUILTIN:
            deprecation(name)
        return V1Family(family)  # type: ignore[return-value]
    check_family(family)
    return family


def list_suites() -> list[SuiteInfo]:
    """Every suite of every family that can be loaded, by name."""
    found: dict[str, SuiteInfo] = {}
    for name in families.names():
        try:
            kind = families.load(name)
        except OrchardError:  # a family whose optional dependency is missing serves no suites
            continue
        for info in kind.suites:
            found.setdefault(info.name, info)
    return sorted(found.values(), key=lambda s: s.name)


def find_suite(name: str) -> SuiteInfo | None:
    return next((s for s in list_suites() if s.name == name), None)


def is_file_suite(suite: str) -> bool:
    """A data file, or a folder of task folders (claw: `--family claw`)."""
    return suite.endswith(FILE_SUFFIXES) or Path(suite).exists()


def resolve(selection: TaskSelection) -> tuple[Family, SuiteInfo]:
    """The family and suite a selection names; an unknown name lists the valid ones."""
    info = find_suite(selection.suite)
    if info is None:
        if not is_file_suite(selection.suite):
            names = [s.name for s in list_suites()]
            raise UnknownNameError(f"unknown suite {selection.suite!r}{did_you_mean(selection.suite, names)}; "
                                   f"valid: {', '.join(names)} (or a data file: .parquet/.jsonl/.json)")
        family = selection.family or (folder_family(Path(selection.suite)) if Path(selection.suite).is_dir()
                                      else FILE_FAMILY)
        info = SuiteInfo(name=Path(selection.suite).stem, family=family,
                         source=selection.suite, description=f"tasks of {selection.suite}")
    elif selection.family and selection.family != info.family:
        raise UsageError(f"suite {info.name!r} belongs to the {info.family} family, not {selection.family!r}")
    return load_family(info.family), info


def family_harness(selection: TaskSelection) -> str:
    """The harness a run of `selection` uses when it names none: its family's `harness` (bash for
    a family that declares none)."""
    family, _ = resolve(selection)
    return getattr(family, "harness", None) or "bash"


def open_suite(selection: TaskSelection, options: RunOptions | None = None) -> tuple[Family, Suite]:
    """The family and its suite as selected: every task the family loads, filtered once by
    `selection` (the suite's `tasks` are the selected ones; its provenance is the whole suite's)."""
    options = options or RunOptions()
    family, info = resolve(selection)
    load_v1 = getattr(family, "load_v1", None)
    if load_v1 is not None:
        suite = load_v1(info, selection, options)
    else:
        suite = family.load(info, selection.source)
    chosen = selection.apply(suite.tasks, family.groups, suite.unlisted)
    return family, dataclasses.replace(suite, tasks=chosen)


def check_host(family: Family, tasks: list[Task], options: RunOptions, what: str = "this run") -> None:
    """What the tasks' episodes need on this machine (`Requirements.host`: names in the table of
    `orchard_cli.prereqs`), all of it checked before a run writes anything: a one-line error
    naming the install command. An episode the run's options refuse anyway (no --network full for
    the live web) needs nothing here. (What the run's backend, family and harness need by name is
    `prereqs.require_host`, called beside this.)"""
    from orchard_cli.prereqs import prereq, require

    needed: dict[str, None] = {}
    for task in tasks:
        with family.episode(task, options) as episode:
            requires = episode.requires
        if requires.host and requires.unmet(options, talks_to_users=True) is None:  # it will run
            needed.update(dict.fromkeys(requires.host))
    if not needed:
        return
    entries = []
    for name in needed:
        try:
            entries.append(prereq(name))
        except KeyError:
            raise UsageError(f"task family {family.name!r} needs the host prerequisite {name!r}, which "
                             "orchard_cli.prereqs does not know") from None
    require(entries, what)


def load_suite(selection: TaskSelection | str, options: RunOptions | None = None,
               **fields: Any) -> tuple[Family, list[Task]]:
    """The family and the selected tasks (`load_suite("swe-mini", limit=3)` is short for a
    TaskSelection)."""
    if "network" in fields:  # a run option since the version-2 seam; still taken here
        options = (options or RunOptions()).model_copy(update={"network": fields.pop("network")})
    if isinstance(selection, str):
        named = {("slice" if k == "slice_" else k): v for k, v in fields.items() if v is not None}
        selection = TaskSelection(suite=selection, **named)
    family, suite = open_suite(selection, options)
    return family, suite.tasks
