"""The `orchard` entry point: the Typer root app and the one error boundary.

Every command module in `commands/` is a thin skin: parse options, build a config, call one
function of the core, render the result. Domain errors derive from `OrchardError`; here they
become one line on stderr, a hint, and a documented exit code (see `orchard_cli.errors`).
Set ORCHARD_DEBUG=1 to see tracebacks.
"""

from __future__ import annotations

import os
import re
import sys

import typer

from orchard_cli import __version__
from orchard_cli.errors import EXIT_INFRA, EXIT_INTERRUPTED, OrchardError

app = typer.Typer(
    name="orchard",
    help="Agent trajectory distillation, training and evaluation on reusable sandboxes.\n\n"
         "\b\nStart here:\n"
         "  orchard doctor                                   what is installed, and how to get the rest\n"
         "  orchard eval claw-mini --predictions gold        a whole suite graded in seconds (no model)\n"
         "  orchard eval claw-mini --harness bash --model smollm2 --limit 2   the embedded model as an agent\n"
         "  orchard view runs/<run>                          browse a run: every episode, step and call",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"orchard {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """orchard: Orchard Env sandboxes, distillation, training, reranking and evaluation."""


_registered: list[bool] = []


def _register() -> None:
    """Attach the command groups to the root app (once per process)."""
    if _registered:
        return
    from orchard_cli.commands import register

    register(app)
    for group in app.registered_groups:  # click's plain help everywhere: option names are never cut
        if group.typer_instance is not None:
            group.typer_instance.rich_markup_mode = None
    _registered.append(True)


def command() -> "typer.core.TyperGroup":
    """The click command tree of the app (help texts not yet filled)."""
    _register()
    return typer.main.get_command(app)  # type: ignore[return-value]


def _say_error(message: str, hint: str | None) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(f"[bold red]error:[/] {escape(message)}", markup=True)
    if hint:  # escaped: a hint such as pip install 'orchard-cli[docker]' is not markup
        console.print(f"[dim]hint:[/] {escape(hint)}", markup=True)


def _traceback() -> None:
    import traceback

    traceback.print_exc(file=sys.stderr)


def _click_errors() -> tuple[type[BaseException], ...]:
    import click

    try:  # typer >= 0.2x raises its vendored copy of click's exceptions
        from typer._click.exceptions import ClickException as TyperClickException
    except ImportError:  # pragma: no cover - older typer
        TyperClickException = click.exceptions.ClickException
    return click.exceptions.ClickException, TyperClickException


_PATH_KIND = ((re.compile(r"(?:file|path) '([^']*)' is a directory\.?"), r"\1 is a folder; name a file"),
              (re.compile(r"(?:directory|dir|path) '([^']*)' is a file\.?"), r"\1 is a file; name a folder"))


def _usage_message(exc: BaseException) -> str:
    """click's message in one line, its path-kind complaints in orchard's words."""
    message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    for pattern, words in _PATH_KIND:
        message = pattern.sub(words, message)
    return message


def _usage_hint(exc: BaseException) -> str | None:
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None)
    return f"see `{path} --help`" if path else None


def main(argv: list[str] | None = None) -> int:
    """Run the CLI. Every failure ends here as one `error:` line (and a `hint:`) on stderr and a
    documented exit code; ORCHARD_DEBUG=1 adds the traceback and keeps the code."""
    debug = os.environ.get("ORCHARD_DEBUG") == "1"
    _register()
    try:
        from orchard_cli.commands._help import fill_help, wants_help

        args = list(sys.argv[1:] if argv is None else argv)
        root = command()
        if wants_help(root, args):  # the registries' names go into the help texts only when shown
            fill_help(root)
        # Without standalone mode click *returns* the code of `typer.Exit(code)` instead of raising.
        code = root.main(args=args, prog_name="orchard", standalone_mode=False)
    except OrchardError as exc:
        if debug:
            _traceback()
        _say_error(exc.message, exc.hint)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a click usage error or a bug
        if isinstance(exc, _click_errors()):  # bad flags or values: one line, exit 2
            _say_error(_usage_message(exc), _usage_hint(exc))
            return exc.exit_code
        if debug:
            _traceback()
        _say_error(f"unexpected {type(exc).__name__}: {exc}",
                   "this is a bug in orchard; rerun with ORCHARD_DEBUG=1 for the traceback")
        return EXIT_INFRA
    return code if isinstance(code, int) else 0


def run() -> None:  # pragma: no cover - console script shim
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
