"""Reading a family's data file: JSON lines (or a JSON list) of task records, every problem a
one-line usage error naming the file and the line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from orchard_cli.errors import NotFoundError, UsageError


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a .jsonl (one JSON object per line) or .json (a list of objects) file."""
    from orchard_cli.tasks.kit.taskfiles import read_data_file

    path = Path(path).expanduser()
    if not os.path.lexists(path) or path.is_dir():
        raise NotFoundError(f"no data file {str(path)!r}")
    text = read_data_file(path)  # the guarded loader: a regular file, capped, no link out of its folder
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not JSON: {exc.msg}") from None
        rows = data if isinstance(data, list) else [data]
        where = [f"item {i}" for i in range(len(rows))]
    else:
        rows, where = [], []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path}:{number}: not JSON: {exc.msg}") from None
                where.append(f"line {number}")
    for place, row in zip(where, rows):
        if not isinstance(row, dict):
            raise UsageError(f"{path} {place}: a task is a JSON object, not {type(row).__name__}")
    return rows
