"""`orchard view RUN [--compare RUN_B] [--out DIR]`: a browsable site for a whole run; and
`orchard view FILE --episode ID` / `--out page.html`: one self-contained HTML page (as before)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import FormatOpt, OutputFormat, emit_json, stderr_console

EXAMPLE = "orchard view runs/claw-mini-20261204-101500      # then open runs/.../view/index.html"


def view(
    run_arg: Annotated[str, typer.Argument(metavar="RUN", help="An `orchard eval` run folder, a distill run folder (X.run), or a trajectories file (.jsonl).")],
    compare_arg: Annotated[Optional[str], typer.Option("--compare", metavar="RUN_B", help="A second run: its episodes too, and a table lining the two up per task.")] = None,
    out_arg: Annotated[Optional[str], typer.Option("--out", metavar="PATH", help="Where the site goes (default: RUN/view/, or X.view/ beside a trajectories file); a name ending in .html writes one self-contained page of a trajectories file instead.")] = None,
    episode: Annotated[Optional[str], typer.Option("--episode", help="One episode of a trajectories file, as one self-contained page (its id, or a unique prefix).")] = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Browse a whole run: the scorecard, every episode (filter, sort, page), and per episode every
    model call, tool dispatch, screenshot, state change and grading detail. Prints the page to open.

    The site is a folder you can copy or serve anywhere (its screenshots are in it); it loads an
    episode only when you open it, so a 10,000-episode run stays fast.

    \b
    Example:
      orchard view runs/web-mini-20261204-101500 --compare runs/web-mini-20261205-090000
    """
    from orchard_cli.errors import UsageError

    # RUN and --out are a folder or a file (a run folder or a trajectories file; a site or a page):
    # plain strings, told apart here
    run, compare = Path(run_arg), Path(compare_arg) if compare_arg else None
    out = Path(out_arg) if out_arg else None
    if episode is not None or (out is not None and out.suffix == ".html"):
        if run.is_dir() or compare is not None:
            raise UsageError("--episode and an --out page.html take a trajectories file, not a run folder",
                             hint=f"orchard view {run} writes the browsable site of the whole run")
        from orchard_cli.view import view as render

        page, shown = render(run, episode=episode, out=out, categories=_categories)
        typer.echo(str(page))
        if shown > 1:
            stderr_console().print(f"{shown} episodes; open the page in a browser", highlight=False)
        return
    from orchard_cli.viewer import build_site, open_source

    source = open_source(run)
    other = open_source(compare) if compare is not None else None
    target = out or (run / "view" if run.is_dir() and not run.name.endswith(".run") else
                     source.path.with_name(source.path.stem + ".view"))
    known = {k: {"label": v.label, "color": v.color} for k, v in _categories(_families(source, other)).items()}
    report = build_site(source, target, compare=other, categories=known)
    if fmt == OutputFormat.json:
        emit_json(report)
        return
    stderr_console().print(f"{report['episodes']} episode(s), {report['screenshots']} screenshot(s); "
                           f"open the page in a browser (or serve {target} anywhere)", highlight=False)
    typer.echo(report["site"])


def _families(*sources) -> set[str]:  # type: ignore[no-untyped-def]
    """The families of the runs (their categories' labels and colours are the families' own)."""
    return {str(s.family) for s in sources if s is not None and getattr(s, "family", None)}


def _categories(names: set[str]):  # type: ignore[no-untyped-def]
    """The outcome categories of the families named (a family that cannot load adds none)."""
    from orchard_cli.errors import OrchardError
    from orchard_cli.families import families
    from orchard_cli.family import family_categories

    merged = {}
    for name in sorted(names):
        try:
            merged.update(family_categories(families.load(name)))
        except OrchardError:
            continue
    return merged
