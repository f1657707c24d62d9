"""What every recipe stage gets: the config, the run folder, where to talk, and the task sets."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchard_cli.recipe.config import RecipeConfig
from orchard_cli.recipe.state import RunFolder, StageRecord

SETS = ("train", "heldout", "unseen")
"""Task sets: the training tasks, held-out seeds of the training templates, held-out templates."""
SET_LABELS = {"heldout": "held-out seeds", "unseen": "held-out templates"}


@dataclass
class Ctx:
    config: RecipeConfig
    folder: RunFolder
    say: Callable[[str], None]
    progress: bool = True
    records: dict[str, StageRecord] = field(default_factory=dict)
    """Stages done so far in this run (skipped or run), by name."""

    def tasks(self, name: str) -> Path:
        return self.folder.path("tasks", name)

    def eval_sets(self) -> list[str]:
        """The held-out sets this recipe evaluates on."""
        return ["heldout"] + (["unseen"] if self.config.synth.unseen_n else [])

    def outputs(self, name: str) -> str:
        record = self.records.get(name)
        return record.outputs if record is not None else ""

    def set_digest(self, name: str) -> str:
        record = self.records.get("synth")
        return (record.result.get("digests") or {}).get(name, "") if record is not None else ""

    def command(self, record: StageRecord, line: str) -> None:
        """Print a stage's equivalent command line and keep it in its record."""
        record.commands.append(line)
        self.say(f"  $ {line}")


def fresh(path: Path) -> Path:
    """`path` removed (a stage that runs again from scratch); returns it."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    return path


def add_cost(record: StageRecord, tokens_in: int | None, tokens_out: int | None, cost: Any) -> None:
    record.tokens_in += int(tokens_in or 0)
    record.tokens_out += int(tokens_out or 0)
    record.cost_usd = None if cost is None or record.cost_usd is None else round(record.cost_usd + float(cost), 6)
