"""Check an `orchard ...` command line against the Typer app without running it: the command
path exists, every option is one it takes, values convert to their types, required arguments are
there. Shared by the help test (each command's example) and the docs test (every command in
README.md and docs/*.md)."""

from __future__ import annotations

import contextlib
import io
import shlex
from typing import Any

from orchard_cli.main import _click_errors, command


def split_line(line: str) -> list[str]:
    """A shell line's words up to a comment, a pipe, `&&`, `;` or a redirection (one command)."""
    words = shlex.split(line, comments=True)
    out = []
    for word in words:
        if word in ("|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "<", "&") or word.startswith((">", "2>", "|")):
            break
        out.append(word)
    return out


_ROOT: list[Any] = []


def _root() -> Any:
    """The click tree, built once (building it takes a good part of a second)."""
    if not _ROOT:
        _ROOT.append(command())
    return _ROOT[0]


def _rest(ctx: Any) -> list[str]:
    protected = getattr(ctx, "_protected_args", None)
    if protected is None:
        protected = getattr(ctx, "protected_args", [])
    return list(protected) + list(ctx.args)


def check_argv(argv: list[str], root: Any = None, *, complete: bool = True) -> str | None:
    """None when `orchard ARGV` parses; else what is wrong, in one line. `complete=False` (a
    command named in prose, `orchard eval regrade`): only the command path and the options given
    are checked, not what is missing."""
    root = root or _root()
    usage_errors = _click_errors()
    with contextlib.redirect_stdout(io.StringIO()):  # --help prints as it parses
        return _check(argv, root, usage_errors, not complete)


def _check(argv: list[str], root: Any, usage_errors: Any, lenient: bool) -> str | None:
    try:
        ctx = root.make_context("orchard", list(argv))
        cmd, rest = root, _rest(ctx)
        while getattr(cmd, "commands", None) and rest:
            name, sub, rest = cmd.resolve_command(ctx, rest)
            if sub is None:
                return f"`orchard {' '.join(argv)}`: no such command {name!r}"
            ctx = sub.make_context(name or "", rest, parent=ctx)
            cmd, rest = sub, _rest(ctx) if getattr(sub, "commands", None) else []
        if getattr(cmd, "commands", None) and not argv[-1:] == ["--help"] and not lenient:
            return f"`orchard {' '.join(argv)}` names a group, not a command"
    except usage_errors as exc:
        if lenient and type(exc).__name__ in ("MissingParameter", "NoArgsIsHelpError"):
            return None  # prose names a command without all it needs
        return f"`orchard {' '.join(argv)}`: {exc.format_message()}"  # type: ignore[attr-defined]
    except Exception as exc:  # click's Exit (--help, --version) is not an error
        if type(exc).__name__ == "Exit":
            return None
        raise
    return None
