"""The claw task format: one folder per task, `task.yaml` plus its fixtures.

    <task>/task.yaml        the task (the `TaskFile` model below)
    <task>/workspace/...    files copied into the agent's workspace (besides `workspace:` in the YAML)

A malformed folder is one line naming the file and the field (`load_task_dir`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchard_cli.errors import UsageError
from orchard_cli.tasks.base import GoldCall
from orchard_cli.tasks.claw.checks import Check
from orchard_cli.tasks.claw.services.fixture import ServicesFixture
from orchard_cli.tools.spec import ToolSpec

TASK_FILE = "task.yaml"
WORKSPACE_DIR = "workspace"
CATEGORIES = ("mail", "calendar", "contacts", "todo", "files", "cross", "safety")
WORKSPACE_LIMIT = 1 << 20
"""Bytes a workspace file may hold (the agent's workspace is text for reading, not a data store)."""
TASK_FILE_LIMIT = 4 << 20
"""Bytes task.yaml may hold."""


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float = Field(600.0, gt=0)
    max_turns: int = Field(30, ge=1)
    max_model_calls: int = Field(60, ge=1)


class Solution(BaseModel):
    """A scripted solution: tool calls in order, commands run in the workspace, a final answer."""

    model_config = ConfigDict(extra="forbid")

    tool_calls: list[GoldCall] = Field(default_factory=list)
    commands: list[str] = Field(default_factory=list)
    answer: str | None = None


class Judge(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rubric: str
    """What an LLM judge is asked to score (reported beside the verdict, never inside it)."""


class TaskFile(BaseModel):
    """One claw task, as `task.yaml` holds it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,79}$")
    family: Literal["claw"] = "claw"
    category: Literal["mail", "calendar", "contacts", "todo", "files", "cross", "safety"]
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    prompt: str = Field(min_length=1)
    """What the user asks, in their words."""
    attachments: list[str] = Field(default_factory=list)
    """Workspace files the prompt refers to (each must be in the workspace)."""
    now: str = "2026-11-30T09:00:00+01:00"
    """The moment the task happens in (the agent is told it; relative dates resolve against it)."""
    services: ServicesFixture = Field(default_factory=ServicesFixture)
    tools: list[str | ToolSpec] = Field(default_factory=list)
    """Tools by catalogue name ('send_message': the services' own actions) or full specs."""
    workspace: dict[str, str] = Field(default_factory=dict)
    """path (relative) -> text: files in the agent's workspace."""
    limits: Limits = Field(default_factory=Limits)
    checks: list[Check] = Field(min_length=1)
    gold: Solution
    near_miss: Solution | None = None
    """A plausible wrong solution (`tasks validate` checks that it fails); None: a mutated gold."""
    judge: Judge | None = None
    tags: list[str] = Field(default_factory=list)

    @field_validator("workspace")
    @classmethod
    def _paths(cls, value: dict[str, str]) -> dict[str, str]:
        for path in value:
            if path.startswith("/") or ".." in Path(path).parts or not path.strip():
                raise ValueError(f"workspace path {path!r} must be relative, without '..'")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "TaskFile":
        ids = [c.id for c in self.checks]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"check id {sorted(dup)[0]!r} is used twice")
        missing = [a for a in self.attachments if a not in self.workspace]
        if missing:
            raise ValueError(f"attachment {missing[0]!r} is not in the workspace")
        names = {t if isinstance(t, str) else t.name for t in self.tools}
        for solution in filter(None, (self.gold, self.near_miss)):
            unknown = [c.tool for c in solution.tool_calls if c.tool not in names]
            if unknown:
                raise ValueError(f"a solution calls {unknown[0]!r}, which is not among the task's tools")
        for check in self.checks:
            if check.kind == "dispatch" and check.tool not in names:
                raise ValueError(f"check {check.id!r} names tool {check.tool!r}, which the task does not have")
        return self

    def tool_specs(self) -> list[ToolSpec]:
        """The task's tools as full specs (catalogue names looked up in the services' actions)."""
        from orchard_cli.tasks.claw.services import ACTIONS

        specs = []
        for tool in self.tools:
            if isinstance(tool, ToolSpec):
                specs.append(tool)
                continue
            found = [(service, action) for service, actions in ACTIONS.items() for action in actions
                     if action == tool]
            if not found:
                raise UsageError(f"unknown tool {tool!r} (not an action of {', '.join(ACTIONS)})")
            service, action = found[0]
            entry = ACTIONS[service][action]
            specs.append(ToolSpec(name=tool, description=entry["description"], input_schema=entry["input_schema"],
                                  service=service, action=action))
        return specs


def _where(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"] if not (isinstance(p, str) and p in ("state", "safety", "dispatch",
                                                                                       "answer", "command")))
    return f"{field or '(top level)'}: {first['msg']}"


def load_task_dir(folder: Path) -> TaskFile:
    """Read one task folder through the guarded loader (tasks/kit/taskfiles.py: nothing outside
    the folder, no special files, sizes capped); a malformed one is a UsageError naming the file
    and the field."""
    import yaml

    from orchard_cli.tasks.kit.taskfiles import TaskFiles

    files = TaskFiles(folder.name, folder)
    path = folder / TASK_FILE
    if not files.exists(TASK_FILE):
        raise UsageError(f"{folder}: no {TASK_FILE} in this task folder")
    try:
        data = yaml.safe_load(files.read_text(TASK_FILE, limit=TASK_FILE_LIMIT))
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of task fields")
    if files.is_dir(WORKSPACE_DIR):
        workspace = dict(data.get("workspace") or {})
        for name, _ in files.files(WORKSPACE_DIR, limit=WORKSPACE_LIMIT):
            workspace[name.removeprefix(WORKSPACE_DIR + "/")] = files.read_text(name, limit=WORKSPACE_LIMIT)
        data["workspace"] = workspace
    try:
        task = TaskFile.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"{path}: {_where(exc)}") from None
    if task.id != folder.name:
        raise UsageError(f"{path}: id: {task.id!r} differs from the folder's name {folder.name!r}")
    try:
        task.tool_specs()  # unknown catalogue names fail here, at load
    except UsageError as exc:
        raise UsageError(f"{path}: tools: {exc.message}") from None
    return task


def dump_task(task: TaskFile, folder: Path) -> None:
    """Write a task folder (used by `tasks synth --family claw`); the YAML holds everything."""
    import yaml

    from orchard_cli.records import write_text

    folder.mkdir(parents=True, exist_ok=True)
    data = task.model_dump(mode="json", by_alias=True)
    write_text(folder / TASK_FILE, yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))


def task_folders(root: Path) -> list[Path]:
    """The task folders under `root` (itself, when it holds a task.yaml), sorted; a task folder
    linked to a place outside `root` is refused (tasks/kit/taskfiles.py)."""
    from orchard_cli.tasks.kit.taskfiles import task_folders as folders

    return folders(root, TASK_FILE)


def as_record(task: TaskFile) -> dict[str, Any]:
    return task.model_dump(mode="json")
