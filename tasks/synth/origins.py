"""Where a synthesized task's tree comes from: a package's sdist (source.py) or a repository's
commit (gitsource.py). `rebuild_repository(record)` makes the task's repository from either."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchard_cli.tasks.synth import gitsource, source


def rebuild_repository(record: dict[str, Any]) -> Path:
    """The (cached) repository of a synthesized instance, by the type of its `source`."""
    if (record.get("source") or {}).get("type") == gitsource.GIT_TYPE:
        return source.rebuild_repository(record, gitsource.build_repository)
    return source.rebuild_repository(record)
