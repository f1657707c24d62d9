"""`orchard doctor`: what is installed, and the exact command for each missing piece."""

from __future__ import annotations


def doctor() -> None:
    """Check prerequisites (bubblewrap, cgroups, Docker, Node, harnesses, the embedded model)."""
