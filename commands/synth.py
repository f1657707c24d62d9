"""`orchard tasks synth`: SWE tasks from real packages (registered in commands/tasks.py)."""

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
    if family in ("claw", "web") and (list_ or templates or exclude_templates):
        chosen = _templates(family, templates, exclude_templates, list_, fmt)
        if chosen is None:
            return
    else:
        chosen = None
        if templates or exclude_templates or list_:
            raise UsageError("--templates, --exclude-templates and --list go with --family claw or web")
    if family == "claw":
        from orchard_cli.commands.claw_tasks import synth_claw

        if out_dir is None:
            raise UsageError("--family claw writes a folder of task folders: give --out-dir DIR")
        synth_claw(out_dir, n, seed, backend, jobs or 1, fmt, templates=chosen)
        return
    if family == "web":
        from orchard_cli.tasks.web.synth import synth_validated

        if out_dir is None:
            raise UsageError("--family web writes a folder of task folders: give --out-dir DIR")
        from orchard_cli.commands._progress import RunProgress

        console = stderr_console()
        with RunProgress("synth", None, console=console, unit="task") as progress:
            report = synth_validated(out_dir, n, seed, backend=backend, workers=jobs or 1, say=progress.say,
                                     chosen=chosen)
        if fmt == OutputFormat.json:
            emit_json(report)
        else:
            sites = ", ".join(f"{site} {count}" for site, count in report["sites"].items())
            console.print(f"kept {report['tasks']}/{n} web tasks in {out_dir} ({sites})", markup=False)
        return
    if family != "swe":
        raise UsageError(f"--family {family!r}: synth makes swe, claw or web tasks")
    if not (package or from_repo) or out is None:
        raise UsageError("SWE tasks need --package NAME==VERSION (or --from-repo PATH --commit SHA) and "
                         "--out FILE.jsonl (or --family claw --out-dir DIR)")
    if bool(from_repo) != bool(commit):
        raise UsageError("--from-repo and --commit go together: --from-repo PATH --commit SHA")
    from orchard_cli.tasks.synth.synth import SynthConfig, refusals, synthesize, write_suite
    from orchard_cli.preflight import Endpoint, check_endpoints

    check_endpoints([Endpoint("--base-url", base_url or "", writer_model)])  # the writer answers, before any build

    config = SynthConfig(packages=package or [], from_repo=from_repo, commit=commit, n=n, seed=seed, max_failing=max_failing,
                         max_candidates=max_candidates, python=python, writer_model=writer_model,
                         base_url=base_url, backend=backend, **({"jobs": jobs} if jobs else {}))
    from orchard_cli.commands._progress import RunProgress

    with RunProgress("synth", None, console=stderr_console(), unit="package") as progress:
        tasks, report = synthesize(config, say=progress.say)
    if tasks:
        write_suite(tasks, out)
        report.out = str(out)
    if fmt == OutputFormat.json:
        emit_json(report.model_dump())
    else:
        _render(report.model_dump())
    refused = refusals(report)
    if refused:
        raise refused


def _templates(family: str, templates: list[str] | None, exclude: list[str] | None, list_: bool,
               fmt: OutputFormat) -> list[str] | None:
    """The chosen templates of --family claw/web; with --list, print them and return None."""
    from orchard_cli.tasks.templates import choose, split_names

    if family == "claw":
        from orchard_cli.tasks.claw.synth_suite import describe, templates as known
    else:
        from orchard_cli.tasks.web.synth import describe, templates as known
    chosen = choose(split_names(templates), split_names(exclude), known(), family)
    if not list_:
        return chosen
    rows = [r for r in describe() if r["template"] in chosen]
    if fmt == OutputFormat.json:
        emit_json({"family": family, "templates": rows})
        return None
    from rich.table import Table

    table = Table(title=f"{family} templates", title_justify="left")
    columns = ["template", *(["site"] if family == "web" else []), "category", "difficulty", "prompt (seed 0)"]
    for column in columns:
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(*(r[c] for c in ["template", *(["site"] if family == "web" else []), "category", "difficulty"]),
                      r["prompt"])
    stdout_console().print(table)
    return None


def _render(report: dict[str, Any]) -> None:
    from rich.table import Table

    from orchard_cli.tasks.synth.mutate import KINDS

    table = Table(title=f"{report['tasks']} tasks -> {report['out'] or 'nothing written'} (seed {report['seed']}, "
                        f"{report['seconds']:.0f} s)", title_justify="left")
    for column in ("package", "tests", "tried", "kept", "rejected", "seconds"):
        table.add_column(column, justify="left" if column in ("package", "rejected", "seconds") else "right")
    for p in report["packages"]:
        rejected = "\n".join(f"{k} {v}" for k, v in sorted(p["rejected"].items())) or "-"
        seconds = "\n".join(f"{k} {v:g}" for k, v in p["seconds"].items())
        kept = f"{p['kept']}/{p['wanted']}" if not p["refused"] else "refused"
        table.add_row(f"{p['package']}=={p['version']}", f"{p['tests']}\n({p['flaky']} flaky)",
                      str(p["tried"]), kept, rejected, seconds)
    kinds = Table(title="kept / tried by mutation kind", title_justify="left")
    kinds.add_column("kind")
    for p in report["packages"]:
        kinds.add_column(p["package"], justify="right")
    for kind in KINDS:
        kinds.add_row(kind, *(f"{p['kinds'][kind]['kept']}/{p['kinds'][kind]['tried']}"
                              for p in report["packages"]))
    console = stdout_console()
    console.print(table)
    console.print(kinds)
