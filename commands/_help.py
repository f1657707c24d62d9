"""Help that teaches: the lists in help texts come from the registries, filled in when help is
shown (so `orchard --help` stays fast and a new family, suite or harness is listed at once).

Help texts say `{suites}`, `{harnesses}`, `{families}` or `{backends}` where the registered names
go. Help is click's plain layout (option names are never cut, whatever the width), `-h` works
everywhere, and every command ends with an example (`Example:` paragraphs are kept as written).
"""

from __future__ import annotations

from typing import Any

PLACEHOLDERS = ("{suites}", "{harnesses}", "{families}", "{backends}")
HELP_FLAGS = ("-h", "--help")
CONTEXT = {"help_option_names": list(HELP_FLAGS), "max_content_width": 100}


def registered() -> dict[str, str]:
    """The registered names, as help shows them."""
    from orchard_cli.env.backends import backends
    from orchard_cli.harnesses import harnesses
    from orchard_cli.tasks.registry import families, list_suites

    return {"{suites}": ", ".join(s.name for s in list_suites()),
            "{harnesses}": ", ".join(harnesses.names()),
            "{families}": ", ".join(families.names()),
            "{backends}": ", ".join(backends.names())}


def _fill(text: str | None, names: dict[str, str]) -> str | None:
    if not text or "{" not in text:
        return text
    for key, value in names.items():
        text = text.replace(key, value)
    return text


def walk(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command of the tree with its path (groups included)."""
    out = [(path, command)]
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        out += walk(sub, (*path, name))
    return out


def fill_help(root: Any, names: dict[str, str] | None = None) -> None:
    """Put the registered names into every help text of the tree."""
    names = names or registered()
    for _, command in walk(root):
        command.help = _fill(command.help, names)
        command.short_help = _fill(command.short_help, names)
        for param in command.params:
            if getattr(param, "help", None):
                param.help = _fill(param.help, names)


def wants_help(root: Any, argv: list[str]) -> bool:
    """Whether these arguments end in help: a help flag, or a group named without a command."""
    if any(a in HELP_FLAGS for a in argv):
        return True
    command = root
    for arg in argv:
        subs = getattr(command, "commands", None)
        if not subs or arg not in subs:
            return False
        command = subs[arg]
    return bool(getattr(command, "commands", None)) and getattr(command, "no_args_is_help", False)


__all__ = ["CONTEXT", "fill_help", "registered", "walk", "wants_help"]
