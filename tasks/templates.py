"""Choosing the templates a synthesis draws from (claw and web: `tasks synth --templates A,B
--exclude-templates C`, listed by `tasks synth --family F --list`)."""

from __future__ import annotations

from orchard_cli.errors import UsageError


def choose(chosen: list[str] | None, exclude: list[str] | None, known: list[str], family: str) -> list[str]:
    """`chosen` (default: every known template) minus `exclude`, in `known`'s order; an unknown
    name is a one-line UsageError listing the valid ones."""
    unknown = [n for n in [*(chosen or ()), *(exclude or ())] if n not in known]
    if unknown:
        raise UsageError(f"no {family} template named {', '.join(dict.fromkeys(unknown))}",
                         hint=f"templates: {', '.join(known)} (orchard tasks synth --family {family} --list)")
    wanted = set(chosen or known) - set(exclude or ())
    names = [n for n in known if n in wanted]
    if not names:
        raise UsageError("--templates / --exclude-templates leave no template to draw from")
    return names


def split_names(values: list[str] | None) -> list[str] | None:
    """Repeated or comma-separated option values -> names (None when none was given)."""
    if not values:
        return None
    return [n.strip() for v in values for n in v.split(",") if n.strip()] or None
