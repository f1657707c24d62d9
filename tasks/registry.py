"""The task registry: families by name, and the suites they declare.

`families` maps a family name to its class: orchard's own (`swe`, and `calc`, the reference
family) and third-party ones from the entry-point group `orchard.tasks`. Each family class
declares its suites (`TaskFamily.suites`); `find_suite(name)` looks through them, importing a
family module only when a name is looked up. `load_suite(selection)` is what `eval`, `distill`,
`tasks` and the value model call.

A data file works as a suite too: `--family NAME` says whose format it is (default: a
SWE-bench-format file, `.parquet`, `.jsonl`, `.json`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchard_cli.errors import OrchardError, UnknownNameError, UsageError
from orchard_cli.registry import Registry, did_you_mean
from orchard_cli.tasks.base import SuiteInfo, Task, TaskFamily, TaskSelection, check_family

families: Registry = Registry("task family", "orchard.tasks", {
    "swe": "orchard_cli.tasks.swe.family:SWEFamily",
    "calc": "orchard_cli.tasks.calc:CalcFamily",
    "claw": "orchard_cli.tasks.claw.family:ClawFamily",
    "claw-eval": "orchard_cli.tasks.claw_eval.family:ClawEvalFamily",
    "web": "orchard_cli.tasks.web.family:WebFamily",
    "live-web": "orchard_cli.tasks.live_web.family:LiveWebFamily",
    "miniwob": "orchard_cli.tasks.miniwob.family:MiniwobFamily",
    "quiz": "orchard_cli.tasks.quiz:QuizFamily",
    "harbor": "orchard_cli.tasks.harbor.family:HarborFamily",
})

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


def load_family(name: str) -> TaskFamily:
    """A new instance of the family called `name`, checked against the seam."""
    family = families.load(name)()
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


def resolve(selection: TaskSelection) -> tuple[TaskFamily, SuiteInfo]:
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


def load_suite(selection: TaskSelection | str, **fields: Any) -> tuple[TaskFamily, list[Task]]:
    """The family and the selected tasks (`load_suite("swe-mini", limit=3)` is short for a
    TaskSelection)."""
    if isinstance(selection, str):
        named = {("slice" if k == "slice_" else k): v for k, v in fields.items() if v is not None}
        selection = TaskSelection(suite=selection, **named)
    family, info = resolve(selection)
    return family, family.load(selection, info)
