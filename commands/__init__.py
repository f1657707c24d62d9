"""One module per command group; `register` attaches them all to the root app.

Command modules import only typer/rich at top level; the core is imported inside each command.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from orchard_cli.commands import doctor, env

    app.add_typer(env.app, name="env")
    app.command("doctor")(doctor.doctor)
