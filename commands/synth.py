"""`orchard tasks synth` (registered in commands/tasks.py): the options, then the named family's
synthesizer (orchard_cli/synthesis.py) does the rest; no family is named here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from orchard_cli.errors import UsageError
from orchard_cli.commands._common import (
    BackendOpt,
    FormatOpt,
    OutputFormat,
    emit_json,
    stderr_console,
    stdout_console,
)


def synth_command(
    out: Annotated[Optional[Path], typer.Option("--out", "-o", dir_okay=False, help="The SWE suite to write (SWE-bench instances, JSONL).")] = None,
    out_dir: Annotated[Optional[Path], typer.Option("--out-dir", file_okay=False, help="--family claw or web: the folder of task folders to write.")] = None,
    package: Annotated[Optional[list[str]], typer.Option("--package", "-p", help="NAME==VERSION; repeat for several packages (swe).")] = None,
    from_repo: Annotated[Optional[str], typer.Option("--from-repo", help="A local git repository (checkout or mirror) to make SWE tasks of, at --commit.")] = None,
    commit: Annotated[Optional[str], typer.Option("--commit", help="The commit of --from-repo (its date is the era of the environment).")] = None,
    family: Annotated[str, typer.Option("--family", help="swe: bugs injected into real packages; claw: personal-assistant tasks; web: browser tasks on the local web apps.")] = "swe",
    n: Annotated[int, typer.Option("--n", min=1, help="Tasks wanted per package.")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same package: the same tasks.")] = 0,
    max_failing: Annotated[int, typer.Option("--max-failing", min=1, help="Keep a mutant when 1 to this many tests fail.")] = 10,
    max_candidates: Annotated[Optional[int], typer.Option("--max-candidates", min=1, help="Mutants tried per package at most (default: 25 x n).")] = None,
    python: Annotated[str, typer.Option("--python", help="Python version of the tasks' environment.")] = "3.11",
    writer_model: Annotated[Optional[str], typer.Option("--writer-model", help="A chat model that rewrites problem statements.")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="Its OpenAI-compatible endpoint (…/v1); key from OPENAI_API_KEY.")] = None,
    jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, help="Sandboxes running mutants at once (default: min(2, cores)); the tasks do not depend on it.")] = None,
    templates: Annotated[Optional[list[str]], typer.Option("--templates", help="--family claw or web: only these templates (comma-separated or repeated; see --list).")] = None,
    exclude_templates: Annotated[Optional[list[str]], typer.Option("--exclude-templates", help="--family claw or web: every template but these.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="--family claw or web: list the templates and exit.")] = False,
    backend: BackendOpt = "local",
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Make validated tasks: SWE bugs in real packages, claw or web tasks.

    --family claw: personal-assistant tasks (mail, calendar, todos,
    contacts, files, phishing), deterministic by --seed, each validated
    three ways before it is kept (gold passes, null and near miss fail);
    --out-dir is the folder of task folders.

    --family web: browser tasks on the local web apps (shop, wiki,
    mail, booking), deterministic by --seed, spread over the sites,
    each validated three ways before it is kept; --out-dir is the
    folder of task folders.

    --family swe (default):
    Fetches each NAME==VERSION's sdist with pip (or reads the tree of
    --from-repo PATH at --commit SHA, whose date is the era of the
    environment), makes a deterministic
    git repository, builds its test environment in a sandbox, finds the
    tests that pass reliably, tries seeded AST mutations of non-test
    code and keeps those that make 1..--max-failing tests fail. Every
    task is checked before it is written: its gold patch resolves it,
    the bug alone does not. Tests failing before any mutation and ids
    the grader cannot read back are left out (counted); a package with
    fewer than 10 tests left is refused: the other packages' tasks are
    written all the same, and the exit code is 1.

    \b
    Example:
      orchard tasks synth --family claw --n 40 --seed 7 --out-dir my-claw
    """
    from orchard_cli.synthesis import SynthRequest, choose_templates, load_synthesizer, split_names

    synth = load_synthesizer(family)
    chosen = None
    if list_ or templates or exclude_templates:
        chosen = choose_templates(synth, split_names(templates), split_names(exclude_templates))
        if list_:
            _list(synth, chosen, fmt)
            return
    where = {"folder": ("--out-dir", out_dir), "file": ("--out", out)}
    flag, target = where[synth.writes]
    other, given = where["file" if synth.writes == "folder" else "folder"]
    if given is not None:
        raise UsageError(f"--family {family} writes {'a folder of task folders' if synth.writes == 'folder' else 'one file'}: "
                         f"give {flag}, not {other}")
    if synth.writes == "folder" and target is None:
        raise UsageError(f"--family {family} writes a folder of task folders: give --out-dir DIR")
    request = SynthRequest(n=n, seed=seed, backend=backend, workers=jobs, out=out, out_dir=out_dir, templates=chosen,
                           options={"packages": package, "from_repo": from_repo, "commit": commit,
                                    "max_failing": max_failing, "max_candidates": max_candidates, "python": python,
                                    "writer_model": writer_model, "base_url": base_url})
    synth.check(request)
    from orchard_cli.commands._progress import RunProgress

    console = stderr_console()
    counted = n if synth.unit == "task" else None
    with RunProgress("synth", counted, console=console, unit=synth.unit,
                     **({"good": "valid"} if counted else {})) as progress:
        result = synth.run(request, say=progress.say,
                           on_task=lambda v: progress.tick(resolved=getattr(v, "valid", None)))
    if fmt == OutputFormat.json:
        emit_json(result.report)
    else:
        shown = stdout_console() if synth.writes == "file" else console
        for part in result.summary:
            shown.print(part, markup=False) if isinstance(part, str) else shown.print(part)
    if result.failure is not None:
        raise result.failure


def _list(synth: Any, chosen: list[str], fmt: OutputFormat) -> None:
    """Print the chosen templates of a synthesizer that has them (`--list`)."""
    rows = [r for r in synth.describe() if r["template"] in chosen]
    if fmt == OutputFormat.json:
        emit_json({"family": synth.family, "templates": rows})
        return
    from rich.table import Table

    table = Table(title=f"{synth.family} templates", title_justify="left")
    columns = [c for c in (rows[0] if rows else {"template": ""}) if c != "prompt"]
    for column in [*columns, "prompt (seed 0)"]:
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(*(r[c] for c in columns), r.get("prompt", ""))
    stdout_console().print(table)
