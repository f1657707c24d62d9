"""All of orchard's state lives under one root: `ORCHARD_HOME` (default `~/.orchard`)."""

from __future__ import annotations

import os
from pathlib import Path


def orchard_home() -> Path:
    """The state root; created on first use, readable by the owner only."""
    root = Path(os.environ.get("ORCHARD_HOME") or Path.home() / ".orchard").expanduser()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


def state_dir(*parts: str) -> Path:
    """A folder under the state root, created on demand."""
    path = orchard_home().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
