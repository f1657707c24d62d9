"""What every web task template shares: the registry, one task's random draw, and the builders
of gold steps (the action tools of actions.py, elements named by Playwright selectors)."""

from __future__ import annotations

import json
import random
from datetime import datetime
from typing import Any, Callable

NOW = datetime.fromisoformat("2026-11-30T09:00:00+00:00")  # a Monday; the booking site's today
TEMPLATES: dict[str, tuple[str, Callable[["Draw"], dict[str, Any]]]] = {}
"""name -> (site, template)."""
USER = ("Alex Morgan", "alex@orchard.test")


def template(name: str, site: str) -> Callable:
    def register(fn: Callable[["Draw"], dict[str, Any]]) -> Callable:
        TEMPLATES[name] = (site, fn)
        return fn
    return register


class Draw:
    """One task's choices: a seeded RNG and the world seed the apps build their defaults from."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)

    def fixture(self, **parts: Any) -> dict[str, Any]:
        return {"seed": self.seed, "now": NOW.isoformat(), **parts}


class Unfit(Exception):
    """This draw cannot make the task (no unique answer, say): the generator tries the next seed."""


# --- selectors and steps ------------------------------------------------------------------------
def role(kind: str, name: str) -> str:
    """A Playwright role selector (name matched whole, case-insensitively)."""
    return f"role={kind}[name={json.dumps(name)}]"


def goto(url: str) -> dict[str, Any]:
    return {"tool": "goto", "arguments": {"url": url}}


def click(selector: str) -> dict[str, Any]:
    return {"tool": "click", "arguments": {"selector": selector}}


def fill(selector: str, value: str) -> dict[str, Any]:
    return {"tool": "fill", "arguments": {"selector": selector, "value": value}}


def choose(selector: str, option: str) -> dict[str, Any]:
    return {"tool": "select_option", "arguments": {"selector": selector, "options": option}}


def tick(selector: str) -> dict[str, Any]:
    return {"tool": "check", "arguments": {"selector": selector, "checked": True}}


def answer(text: str) -> dict[str, Any]:
    return {"tool": "answer", "arguments": {"text": text}}


# --- checks ---------------------------------------------------------------------------------------
def answer_check(**spec: Any) -> dict[str, Any]:
    return {"id": "answer", "kind": "answer", **spec}


def request_check(cid: str, site: str, path: str, form: dict[str, str] | None = None,
                  count: int | None = None, method: str = "POST") -> dict[str, Any]:
    check: dict[str, Any] = {"id": cid, "kind": "request", "site": site, "method": method, "path": path,
                             "form": form or {}}
    if count is not None:
        check["count"] = count
    return check


def state_check(cid: str, site: str, sql: str, expect: list[list[Any]]) -> dict[str, Any]:
    return {"id": cid, "kind": "state", "site": site, "sql": sql, "expect": expect}


def sql_text(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"
