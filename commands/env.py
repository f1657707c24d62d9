"""`orchard env ...`: bring up and drive Orchard Env (placeholder; filled in by the service work)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Orchard Env: sandboxes over local, docker and kubernetes backends.", no_args_is_help=True)
