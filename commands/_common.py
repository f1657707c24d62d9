"""Options shared by several commands, declared once, and output helpers."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any

import typer


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="text for people, json for scripts.")]
BackendOpt = Annotated[str, typer.Option("--backend", "-b", help="Sandbox backend: local, docker or kubernetes.")]


def emit_json(data: Any) -> None:
    """Results go to stdout; everything else to stderr."""
    typer.echo(json.dumps(data, indent=2, default=str))


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def stdout_console():
    from rich.console import Console

    return Console(highlight=False)
