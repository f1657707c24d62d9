"""A web task as its `task.yaml` holds it (the `web-mini` suite; docs/web.md has the format).

    id, site, category, difficulty, prompt
    start      {site, path}: where the browser opens
    sites      the only sites the browser may reach (others are blocked and recorded)
    fixture    what the local web apps are reset to before the attempt (tasks/web/apps)
    limits     timeout_seconds, max_turns, max_model_calls
    checks     all must pass (checks.py): `answer` (the final answer), `request` (the apps'
               request log: the order was placed with the right variant), `state` (a read-only
               SQL query on a site's database after the episode)
    gold       the reference solution: calls of the action tools (tasks/kit/browser_actions.py), elements named by
               Playwright selectors
    near_miss  a plausible wrong solution, which must fail (`orchard tasks validate`)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchard_cli.errors import UsageError
from orchard_cli.tasks.web.checks import Check

SITES = ("shop", "wiki", "mail", "booking")
TASK_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")
TASK_FILE = "task.yaml"
TASK_FILE_LIMIT = 4 << 20
"""Bytes task.yaml may hold."""


class Start(BaseModel):
    model_config = ConfigDict(extra="forbid")

    site: str
    path: str = "/"

    def url(self) -> str:
        return f"{self.site}:{self.path if self.path.startswith('/') else '/' + self.path}"


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float = Field(300.0, gt=0)
    max_turns: int = Field(30, ge=1)
    max_model_calls: int | None = Field(None, ge=1)


class Step(BaseModel):
    """One call of an action tool."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tool")
    @classmethod
    def _tool(cls, value: str) -> str:
        from orchard_cli.tasks.kit.browser_actions import NAMES

        if value not in NAMES:
            raise ValueError(f"unknown action {value!r} (one of {', '.join(NAMES)})")
        return value


class WebTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    site: str
    category: str
    difficulty: Literal["easy", "medium", "hard"] = "medium"
    prompt: str
    start: Start
    sites: list[str]
    fixture: dict[str, Any] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)
    checks: list[Check]
    gold: list[Step]
    near_miss: list[Step] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not TASK_ID.match(value):
            raise ValueError(f"task id {value!r}: lower-case letters, digits and dashes")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "WebTask":
        unknown = [s for s in [self.site, self.start.site, *self.sites] if s not in SITES]
        if unknown:
            raise ValueError(f"unknown site {unknown[0]!r} (one of {', '.join(SITES)})")
        if self.start.site not in self.sites or self.site not in self.sites:
            raise ValueError("`sites` must include the task's site and its start site")
        if not self.checks:
            raise ValueError("a task needs at least one check")
        ids = [c.id for c in self.checks]
        if len(set(ids)) != len(ids):
            raise ValueError("check ids must be unique")
        return self



def task_folders(root: Path) -> list[Path]:
    """The task folders under `root` (itself, when it holds a task.yaml), sorted; a task folder
    linked to a place outside `root` is refused (tasks/kit/taskfiles.py)."""
    from orchard_cli.tasks.kit.taskfiles import task_folders as folders

    return folders(root, TASK_FILE)


def read_task_file(folder: Path) -> bytes:
    """The bytes of `task.yaml`, through the guarded loader (nothing outside the folder)."""
    from orchard_cli.tasks.kit.taskfiles import TaskFiles

    files = TaskFiles(folder.name, folder)
    if not files.exists(TASK_FILE):
        raise UsageError(f"{folder / TASK_FILE}: cannot read: no such file")
    return files.read_bytes(TASK_FILE, limit=TASK_FILE_LIMIT)


def load_task_dir(folder: Path) -> WebTask:
    import yaml

    path = folder / TASK_FILE
    try:
        data = yaml.safe_load(read_task_file(folder).decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from exc
    try:
        return WebTask.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path}: {where + ': ' if where else ''}{first['msg']}") from exc
