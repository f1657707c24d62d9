"""`orchard view FILE [--episode ID] [--out page.html]`: trajectories as an HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def view(
    file: Annotated[Path, typer.Argument(metavar="FILE", dir_okay=False, help="A trajectories file (orchard distill, or trajectories.jsonl of an eval run).")],
    episode: Annotated[Optional[str], typer.Option("--episode", help="Only this episode (its id, or a unique prefix).")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", dir_okay=False, help="The page to write (default: beside FILE, .html).")] = None,
) -> None:
    """Write a self-contained HTML page of the episodes: conversation, tool calls, patch, verdict."""
    from orchard_cli.view import view as render

    page, shown = render(file, episode=episode, out=out, categories=_categories)
    typer.echo(str(page))
    if shown > 1:
        from orchard_cli.commands._common import stderr_console

        stderr_console().print(f"{shown} episodes; open the page in a browser", highlight=False)


def _categories(names: set[str]):  # type: ignore[no-untyped-def]
    """The outcome categories of the families named (a family that cannot load adds none)."""
    from orchard_cli.errors import OrchardError
    from orchard_cli.tasks.base import family_categories
    from orchard_cli.tasks.registry import families

    merged = {}
    for name in sorted(names):
        try:
            merged.update(family_categories(families.load(name)))
        except OrchardError:
            continue
    return merged
