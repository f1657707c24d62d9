"""`orchard doctor`: what is installed, and the exact command for each missing piece.

Exit 0 when the embedded default (the local backend over bubblewrap) can run, 3 otherwise.
"""

from __future__ import annotations

import typer

from orchard_cli.commands._common import FormatOpt, OutputFormat, emit_json, stderr_console, stdout_console


def _needed_by(keys: list[str]) -> str:
    """'backend:local', 'family:web', 'harness:codex' -> 'local backend; web tasks; codex harness'."""
    kinds: dict[str, list[str]] = {}
    for key in keys:
        first, _, condition = key.partition("+")
        kind, _, name = first.partition(":")
        if condition:  # 'family:live-web+network:full'
            name += f" (--{condition.replace(':', ' ')})"
        kinds.setdefault(kind, []).append(name)
    words = {"backend": "backend", "family": "tasks", "harness": "harness"}
    return "; ".join(f"{', '.join(names)} {words.get(kind, kind)}" for kind, names in kinds.items()) or "-"


def doctor(fmt: FormatOpt = OutputFormat.text) -> None:
    """Check every host prerequisite (bubblewrap, git, cgroups, Docker, Chromium + Playwright,
    MiniWoB++, the claw services, Node, the harnesses, the embedded model), say what needs each
    and the exact line that installs what is missing. The same table every run checks first.

    \b
    Example:
      orchard doctor --format json | jq '.checks[] | select(.ok | not)'
    """
    from orchard_cli.prereqs import doctor_report

    report = doctor_report()
    if fmt == OutputFormat.json:
        emit_json(report.model_dump())
    else:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        table = Table("component", "status", "version", "needed by", "detail", box=None)
        for check in report.checks:
            if check.ok:
                status = "[yellow]ok (see below)[/]" if check.fix else "[green]ok[/]"
            else:
                status = "[red]missing[/]" if check.required else "[yellow]missing[/]"
            name = check.name + (" (required)" if check.required else "")
            detail = check.detail if len(check.detail) < 90 else check.detail[:87] + "..."
            table.add_row(escape(name), status, escape(check.version), escape(_needed_by(check.needed_by)),
                          escape(detail))
        console = stdout_console()
        if not console.is_terminal:  # a pipe or a file: whole rows, never cut at 80 columns
            console = Console(highlight=False, width=220)
        console.print(table)
        fixes = [c for c in report.checks if c.fix]
        if fixes:
            typer.echo("\nto install or fix:")
            width = max(len(c.name) for c in fixes)
            for check in fixes:
                typer.echo(f"  {check.name:<{width}}  {check.fix}")
    if not report.ready:
        missing = ", ".join(c.name for c in report.checks if c.required and not c.ok)
        stderr_console().print(f"the embedded default (local backend + bubblewrap) cannot run: "
                               f"missing {missing}", markup=False, soft_wrap=True)
        raise typer.Exit(3)
    stderr_console().print("the embedded default (local backend + bubblewrap) can run", markup=False, soft_wrap=True)
