"""Path rules of the file API: every path must stay inside the sandbox's workdir or /tmp."""

from __future__ import annotations

import posixpath

from orchard_cli.errors import PathEscapeError

ALLOWED_ROOTS = ("/tmp",)


def resolve_sandbox_path(workdir: str, path: str) -> str:
    """Normalise `path` (relative paths are taken from `workdir`); refuse any escape."""
    if not path or "\x00" in path:
        raise PathEscapeError(f"invalid path {path!r}")
    joined = path if path.startswith("/") else posixpath.join(workdir, path)
    norm = posixpath.normpath(joined)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    for root in (workdir, *ALLOWED_ROOTS):
        if norm == root or norm.startswith(root.rstrip("/") + "/"):
            return norm
    raise PathEscapeError(
        f"path {path!r} is outside the sandbox workspace {workdir!r}",
        hint=f"use a path below {workdir} or /tmp",
    )
