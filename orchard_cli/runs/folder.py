"""`RunFolder`: an eval run's folder, each file by its one name, read back the one way."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchard_cli.errors import UsageError

if TYPE_CHECKING:
    from orchard_cli.family import Task
    from orchard_cli.scoring.scorecard import AttemptResult


def safe_name(name: str) -> str:
    """A file-system-safe folder name for a task id."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "instance"


class RunFolder:
    """The folder `orchard eval --out` writes (the layout: `orchard_cli.runs`)."""

    CONFIG = "config.json"
    TASKS = "tasks.jsonl"
    RESULTS = "results.jsonl"
    TRAJECTORIES = "trajectories.jsonl"
    SCORECARD = "scorecard.json"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def config(self) -> Path:
        return self.path / self.CONFIG

    @property
    def tasks(self) -> Path:
        return self.path / self.TASKS

    @property
    def results(self) -> Path:
        return self.path / self.RESULTS

    @property
    def trajectories(self) -> Path:
        return self.path / self.TRAJECTORIES

    @property
    def scorecard(self) -> Path:
        return self.path / self.SCORECARD

    @property
    def scorecard_md(self) -> Path:
        return self.path / "scorecard.md"

    @property
    def scorecard_html(self) -> Path:
        return self.path / "scorecard.html"

    def log_dir(self, task_id: str, attempt: int) -> Path:
        """Where an attempt's logs go: logs/<task>/attempt-<k>."""
        return self.path / "logs" / safe_name(task_id) / f"attempt-{attempt}"

    def is_run(self) -> bool:
        """Whether an eval wrote here (its results.jsonl is there)."""
        return self.results.is_file()

    def require(self, *, config: bool = False) -> RunFolder:
        """This folder, or one line saying it is not an eval run (`config`: its config.json is needed too)."""
        if not self.is_run():
            raise UsageError(f"{self.path} is not an orchard eval run (no {self.RESULTS})",
                             hint="pass the folder `orchard eval --out` wrote")
        if config and not self.config.is_file():
            raise UsageError(f"{self.path} has results but no {self.CONFIG}: cannot tell how it was run",
                             hint="pass the folder `orchard eval --out` wrote, whole")
        return self

    def read_config(self) -> dict[str, Any]:
        """config.json as written ({} where there is none)."""
        from orchard_cli.records import read_json

        return read_json(self.config) if self.config.is_file() else {}

    def read_scorecard(self) -> dict[str, Any]:
        """scorecard.json as written ({} where there is none yet)."""
        from orchard_cli.records import read_json

        return read_json(self.scorecard) if self.scorecard.is_file() else {}

    def latest_results(self) -> list[AttemptResult]:
        """One result per (task, attempt), the latest line written ([] before the first)."""
        from orchard_cli.records import read_jsonl
        from orchard_cli.scoring.scorecard import latest_results

        rows, _ = read_jsonl(self.results)
        return latest_results(rows)

    def write_tasks(self, tasks: list[Task]) -> None:
        from orchard_cli.records import encode_line, write_text

        lines = (encode_line({"schema_version": 1, **t.model_dump(mode="json")}) for t in tasks)
        write_text(self.tasks, b"".join(lines).decode("utf-8"))

    def read_tasks(self) -> list[Task]:
        """The tasks the run recorded, in order ([] for runs from before tasks.jsonl)."""
        from orchard_cli.family import Task
        from orchard_cli.records import read_jsonl

        rows, _ = read_jsonl(self.tasks)
        return [Task.model_validate({k: v for k, v in row.items() if k != "schema_version"}) for row in rows]
