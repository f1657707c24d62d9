"""What the demonstrator `gold` says next: a task's reference solution as a harness's model turns.

A reference (the family's `Gold`, as plain data: `patch`, `commands`, `tool_calls`, `answer`)
becomes a list of moves, played one per model call, in the order the gold solver plays them:
the patch (as a shell command that applies it), the commands, the tool calls, then the final
answer. Each move is written in the format of the request it answers, read off the tools the
harness offers:

| move | the harness offers | the reply |
|---|---|---|
| tool `T` | a function `T`, or one ending in `__T` (`task__T`, `mcp__task__T`: MCP) | that function call |
| tool `T` | only a shell tool (`bash`, `exec`, `exec_command`, `shell`) | `task-tool T 'JSON'` through it (orchard's bash agent) |
| tool `T` | no tools at all (orchard's web agent) | BrowserGym's action syntax: `click("e12")`, `fill("e5", "mug")`, `answer("42")` |
| command | a shell tool | a call of it (`command`, `cmd`, ... as its schema names it) |
| answer | anything | the text as the assistant's message (no tool call: the harness stops) |

A web step names its element by Playwright selector; the web agent's actions name it by the
page's `[ref=...]` id, so a `locate(selector)` (the episode's browser, see gold.py) turns one into
the other (a click on an element without an id of its own goes to its centre: `mouse_click`). A move that cannot be written for the request (no shell tool for a command,
no such tool) is an error: the reference cannot be played in that harness.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable

from orchard_cli.models.toolcall import SHELL_TOOLS, _shell_arguments

TASK_TOOL = "task-tool"
"""The command orchard's bash agent puts on the sandbox's PATH to call a task's tools."""
PATCH_MARK = "ORCHARD_GOLD_PATCH"
BROWSERGYM_ARGS = {
    "click": ["bid"], "fill": ["bid", "value"], "select_option": ["bid", "options"], "check": ["bid"],
    "hover": ["bid"], "press": ["key"], "scroll": ["dx", "dy"], "goto": ["url"], "go_back": [],
    "go_forward": [], "new_tab": ["url"], "tab_focus": ["index"], "tab_close": [],
    "mouse_click": ["x", "y"], "answer": ["text"], "send_msg_to_user": ["text"],
}
"""BrowserGym's high-level actions and their positional arguments, as orchard's web agent reads them."""
Locate = Callable[[str], "dict[str, Any] | None"]
"""selector -> {"bid": id} (the element has an id on the page), else {"ancestor": id of its nearest
ancestor with one, "x", "y": its centre}; None when nothing matches."""


class MoveError(Exception):
    """The reference's next move cannot be written for this request."""


@dataclass
class Move:
    kind: str
    """'tool', 'command' or 'answer'."""
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    text: str = ""


def moves_of(reference: dict[str, Any]) -> list[Move]:
    """The moves of a reference, in the order the gold solver plays them; the last is the answer."""
    moves: list[Move] = []
    patch = reference.get("patch")
    if patch:
        body = patch if patch.endswith("\n") else patch + "\n"
        moves.append(Move("command", text=f"git apply --whitespace=nowarn - <<'{PATCH_MARK}'\n{body}{PATCH_MARK}"))
    moves += [Move("command", text=c) for c in reference.get("commands") or ()]
    for call in reference.get("tool_calls") or ():
        moves.append(Move("tool", name=call["tool"], arguments=dict(call.get("arguments") or {})))
    last = moves[-1] if moves else None
    answered = last is not None and last.kind == "tool" and last.name in ("answer", "send_msg_to_user")
    browsing = any(m.kind == "tool" and m.name in BROWSERGYM_ARGS for m in moves)
    if browsing and not answered:  # a browser task ends with its answer action (MiniWoB: "done")
        moves.append(Move("tool", name="answer", arguments={"text": reference.get("answer") or "done"}))
    elif not answered:
        moves.append(Move("answer", text=reference.get("answer") or "Done."))
    return moves


def _functions(chat: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for tool in chat.get("tools") or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            out[fn["name"]] = fn
    return out


def _shell(functions: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    return next((functions[n] for n in SHELL_TOOLS if n in functions), None)


def _browsergym(name: str, arguments: dict[str, Any]) -> str:
    """One action in BrowserGym's syntax: `fill("e5", "red mug")`."""
    if name not in BROWSERGYM_ARGS:
        raise MoveError(f"the action {name!r} has no BrowserGym form")
    order = list(BROWSERGYM_ARGS[name])
    if name == "press" and "bid" in arguments:
        order = ["bid", "key"]
    values = [arguments[key] for key in order if key in arguments]
    if name == "check" and arguments.get("checked") is False:
        raise MoveError("unticking a box has no BrowserGym action here (check only ticks)")
    return f"{name}({', '.join(json.dumps(v, ensure_ascii=False) for v in values)})"


def _with_ref(name: str, arguments: dict[str, Any], locate: Locate | None) -> tuple[str, dict[str, Any]]:
    """A step that names its element by selector, named as the agent can: by the page's id of that
    element; a click on an element without an id of its own (a link inside a paragraph) at its
    centre (`mouse_click`); anything else by the id of its nearest ancestor that has one."""
    selector = arguments.get("selector")
    if not selector:
        return name, arguments
    if locate is None:
        raise MoveError(f"the step names its element by selector ({selector!r}) and this episode has no "
                        "browser to find its id in")
    found = locate(selector)
    if found is None:
        raise MoveError(f"no element on the page matches {selector!r}")
    rest = {k: v for k, v in arguments.items() if k != "selector"}
    if "bid" not in found and name == "click" and "x" in found:
        return "mouse_click", {"x": found["x"], "y": found["y"]}
    ref = found.get("bid") or found.get("ancestor")
    if ref is None:
        raise MoveError(f"the element {selector!r} has no id on the page")
    return name, {**rest, "bid": ref}


def reply(move: Move, chat: dict[str, Any], locate: Locate | None = None) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """(content, [(function name, arguments)]) answering `chat` with `move`."""
    functions = _functions(chat)
    if move.kind == "answer":
        return move.text, []
    shell = _shell(functions)
    if move.kind == "command":
        if shell is None:
            raise MoveError("the reference runs a shell command and the harness offers no shell tool "
                            f"(tools: {', '.join(sorted(functions)) or 'none'})")
        return "", [(shell["name"], _shell_arguments(shell, move.text))]
    name = move.name
    if name in functions:
        return "", [(name, move.arguments)]
    suffixed = sorted(n for n in functions if n.endswith("__" + name))
    if suffixed:
        return "", [(suffixed[0], move.arguments)]
    if not functions:
        return _browsergym(*_with_ref(name, move.arguments, locate)), []
    if shell is not None:
        line = f"{TASK_TOOL} {name} {shlex.quote(json.dumps(move.arguments, ensure_ascii=False))}"
        return "", [(shell["name"], _shell_arguments(shell, line))]
    raise MoveError(f"the reference calls the tool {name!r} and the harness offers neither it nor a shell "
                    f"(tools: {', '.join(sorted(functions))})")
