"""`orchard tasks validate PATH` and `orchard tasks synth --family claw`: claw task folders,
checked three ways (registered in commands/tasks.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import (BackendOpt, FormatOpt, GroupsOpt, ImageMapOpt, OutputFormat, QuietOpt,
                                          SampleOpt, SampleSeedOpt, emit_json, stderr_console, task_selection)


def validate_command(
    path: Annotated[str, typer.Argument(metavar="PATH", help="A task folder, a folder of task folders, or a suite with near misses (claw-mini, web-mini; suites: {suites}).")],
    instances: Annotated[Optional[str], typer.Option("--instances", help="Comma-separated task ids.")] = None,
    group: GroupsOpt = None,
    sample: SampleOpt = None,
    sample_seed: SampleSeedOpt = None,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Episodes at once.")] = 1,
    backend: BackendOpt = "local",
    image_map: ImageMapOpt = None,
    quiet: QuietOpt = False,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Check tasks three ways: the gold solution passes, a null run fails, a near miss fails.

    Exit 0 when every task is valid, 1 when one is not (each named with why).

    \b
    Example:
      orchard tasks validate claw-mini --workers 2
    """
    from orchard_cli.errors import EXIT_BELOW_BAR
    from orchard_cli.tasks.validate import validate_tasks
    from orchard_cli.families import folder_family, load_suite
    from orchard_cli.rollout.choose import reference

    selection = task_selection(path, family=folder_family(Path(path)) if Path(path).exists() else None, dataset=None,
                               instances=instances, repo=None, limit=None, slice_=None, repo_mirror=None,
                               image_map=image_map, groups=group, sample=sample, sample_seed=sample_seed)
    family, tasks = load_suite(selection)
    if not tasks:
        from orchard_cli.errors import UsageError

        raise UsageError(f"{path}: no task matches the selection")
    from orchard_cli.prereqs import require_host

    require_host(backend=backend, family=family.name, what=f"validating {path} on the {backend} backend")
    if reference(family, tasks[0], None, "near_miss") is None and family.grading != "in_place":  # harbor: where one ships
        from orchard_cli.errors import UsageError

        raise UsageError(f"{path}: `tasks validate` checks tasks with near misses (claw, web); "
                         f"the {family.name} family has none",
                         hint="SWE suites: orchard eval SUITE --predictions gold")
    from orchard_cli.commands._progress import RunProgress

    console = stderr_console(quiet)
    with RunProgress("validate", len(tasks), console=console, quiet=quiet, unit="task", good="valid") as progress:

        def say(v) -> None:  # type: ignore[no-untyped-def]
            progress.tick(resolved=v.valid)
            if fmt != OutputFormat.json:
                progress.say(f"{'valid' if v.valid else 'INVALID':>8}  {v.task_id}" + ("" if v.valid else f"  {v.reason()}"))

        results = validate_tasks(family, tasks, backend=backend, workers=workers, on_task=say)
    bad = [r for r in results if not r.valid]
    if fmt == OutputFormat.json:
        emit_json({"tasks": len(results), "valid": len(results) - len(bad),
                   "results": [r.model_dump() for r in results]})
    else:
        console.print(f"{len(results) - len(bad)}/{len(results)} tasks valid", markup=False)
    if bad:
        raise typer.Exit(EXIT_BELOW_BAR)
