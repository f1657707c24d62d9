"""`orchard doctor`: what is installed, and the exact command for each missing piece.

Exit 0 when the embedded default (the local backend over bubblewrap) can run, 3 otherwise.
"""

from __future__ import annotations

import typer

from orchard_cli.commands._common import FormatOpt, OutputFormat, emit_json, stderr_console, stdout_console


def doctor(fmt: FormatOpt = OutputFormat.text) -> None:
    """Check prerequisites (bubblewrap, cgroups, Docker, Node, harnesses, the embedded model)."""
    from orchard_cli.doctor import run_doctor

    report = run_doctor()
    if fmt == OutputFormat.json:
        emit_json(report.model_dump())
    else:
        from rich.markup import escape
        from rich.table import Table

        table = Table("component", "status", "version", "detail", box=None)
        for check in report.checks:
            if check.ok:
                status = "[yellow]ok (see below)[/]" if check.fix else "[green]ok[/]"
            else:
                status = "[red]missing[/]" if check.required else "[yellow]missing[/]"
            name = check.name + (" (required)" if check.required else "")
            table.add_row(escape(name), status, escape(check.version), escape(check.detail))
        stdout_console().print(table)
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
