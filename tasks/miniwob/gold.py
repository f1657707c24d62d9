"""Reference solutions for a few simple MiniWoB++ tasks, read off the task's instruction and
written as calls of the web action space (elements by Playwright selector), so a gold run goes
through the same tools an agent uses: they show the suite's plumbing end to end (reward 1 ->
resolved). MiniWoB++ itself ships no solutions; the other tasks have none (`--predictions gold`
refuses them)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

Step = tuple[str, dict[str, Any]]


def _quoted(utterance: str) -> str | None:
    found = re.search(r'"([^"]*)"', utterance)
    return found.group(1) if found else None


def _exact(text: str) -> str:
    return f"text={json.dumps(text)}"  # Playwright: the element whose whole text is exactly this


def _click_button(u: str) -> list[Step] | None:
    target = _quoted(u)
    return None if target is None else [("click", {"selector": f"button:text-is({json.dumps(target)})"})]


def _click_link(u: str) -> list[Step] | None:
    target = _quoted(u)
    return None if target is None else [("click", {"selector": f"#area >> {_exact(target)}"})]


def _enter_text(u: str) -> list[Step] | None:
    target = _quoted(u)
    return None if target is None else [("fill", {"selector": "#tt", "value": target}),
                                        ("click", {"selector": "#subbtn"})]


def _focus_text(u: str) -> list[Step]:
    return [("click", {"selector": "#tt"})]


def _click_dialog(u: str) -> list[Step]:
    return [("click", {"selector": ".ui-dialog-titlebar-close"})]


def _click_checkboxes(u: str) -> list[Step] | None:
    found = re.match(r"Select (.*) and click Submit\.?$", u.strip())
    if found is None:
        return None
    names = [] if found.group(1) == "nothing" else [n.strip() for n in found.group(1).split(",")]
    return [("check", {"selector": f"#boxes label:text-is({json.dumps(n)}) input", "checked": True})
            for n in names] + [("click", {"selector": "#subbtn"})]


SOLVERS: dict[str, Callable[[str], list[Step] | None]] = {
    "click-button": _click_button, "click-link": _click_link, "enter-text": _enter_text,
    "focus-text": _focus_text, "click-dialog": _click_dialog, "click-checkboxes": _click_checkboxes,
}


def has_gold(name: str) -> bool:
    return name in SOLVERS


def gold_steps(name: str, utterance: str) -> list[Step] | None:
    """The reference steps for task `name` given its instruction, or None (no solver, or an
    instruction the solver cannot read)."""
    solver = SOLVERS.get(name)
    return None if solver is None else solver(utterance)
