"""The recipe's run folder and what lets `--resume` skip finished stages.

    DIR/recipe.json          the RecipeConfig
    DIR/stages/<name>.json   one StageRecord per stage: its inputs' digest, status, the command
                             line(s) it stands for, seconds, tokens and cost, and its outputs'
                             digest (what later stages put into their own inputs)

A stage's inputs are its part of the config plus the output digests of the stages it reads. A
stage is skipped when its record is finished with the same inputs digest; otherwise it runs (a
record still `running` with the same inputs is continued with its command's own --resume; with
other inputs its outputs are removed first). Since a later stage's inputs hold the digests of what
it reads, a stage that ran again with another result makes every stage that reads it run again.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.records import read_json, write_json

CONFIG_FILE = "recipe.json"
STAGES_DIR = "stages"


class StageRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    name: str
    inputs: str
    """sha256 of the stage's inputs (its config part and the digests of what it reads)."""
    status: Literal["running", "finished"] = "running"
    commands: list[str] = Field(default_factory=list)
    """The equivalent command line(s), as printed."""
    started_at: float = Field(default_factory=time.time)
    seconds: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = 0.0
    """None when a model's price is unknown."""
    outputs: str = ""
    """Digest of what the stage wrote (later stages' inputs)."""
    result: dict[str, Any] = Field(default_factory=dict)
    """A few numbers for the report (kept, resolved, steps, loss...)."""


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:20]


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:20]


def tree_digest(folder: Path, pattern: str = "**/*") -> str:
    """Digest of every file under `folder` (paths and bytes), in path order."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.glob(pattern) if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + file_digest(path).encode())
    return h.hexdigest()[:20]


class RunFolder:
    """DIR: the config, and one record per stage."""

    def __init__(self, out: Path) -> None:
        self.root = Path(out)
        self.stages = self.root / STAGES_DIR

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def check(self, config: Any, resume: bool) -> None:
        """A new or empty DIR, or (with --resume) a recipe's DIR; anything else is refused."""
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(f"--out {self.root} exists and is a file", hint="pass a new folder")
        if not self.root.exists() or not any(self.root.iterdir()):
            return
        if not (self.root / CONFIG_FILE).is_file():
            raise UsageError(f"--out {self.root} exists and holds no recipe ({CONFIG_FILE})",
                             hint="pass a new or empty folder")
        if not resume:
            raise UsageError(f"--out {self.root} already holds a recipe run",
                             hint="add --resume to continue it (changed settings re-run the stages they reach), "
                                  "or pass a new folder")
        old = read_json(self.root / CONFIG_FILE)
        if old.get("family") != config.family:
            raise UsageError(f"--out {self.root} holds a {old.get('family')} recipe, not {config.family}",
                             hint="pass a new folder")

    def write_config(self, config: Any) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_json(self.root / CONFIG_FILE, config)

    def record(self, name: str) -> StageRecord | None:
        path = self.stages / f"{name}.json"
        if not path.is_file():
            return None
        try:
            return StageRecord.model_validate(read_json(path))
        except ValueError:
            return None

    def save(self, record: StageRecord) -> None:
        self.stages.mkdir(parents=True, exist_ok=True)
        write_json(self.stages / f"{record.name}.json", record)
