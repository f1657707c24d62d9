"""The harnesses' own tools: a shell, file reading, writing, editing and listing, by the names each
harness gives the model, read back from a recorded conversation.

A family whose benchmark records such actions beside its own tools (Claw-Eval's runner records
`Bash`, `Read`, `Write`, `Edit`, `Glob` as tool calls its graders see) finds them here: `action`
says what one tool call of the conversation was, in a vocabulary of five kinds, its argument
(the command, the path) under one key. The names were read from the tools each harness sent
through the recording proxy (Codex 0.171.0, OpenClaw 2026.9.6, orchard's bash agent); ZeroClaw's
from its documentation (no binary here to check).

A shell command that only calls a task tool (`task-tool NAME ARGS`, the way orchard's bash agent
calls them) is that tool's call, already recorded by the tool gateway: `task_tool_call` says which.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

SHELL, READ, WRITE, EDIT, LIST = "shell", "read", "write", "edit", "list"


@dataclass(frozen=True)
class Builtin:
    kind: str
    key: str
    """The argument holding the command (shell) or the path (the others)."""
    keep: tuple[str, ...] = ()
    """Further arguments worth keeping (a write's content, a read's offset), by their own names."""


BUILTINS: dict[str, Builtin] = {
    # orchard's bash agent
    "bash": Builtin(SHELL, "command"),
    # Codex CLI (exec_command; write_stdin continues a running command: not a new one)
    "exec_command": Builtin(SHELL, "cmd", ("workdir",)),
    "view_image": Builtin(READ, "path"),
    "apply_patch": Builtin(EDIT, "input"),
    # OpenClaw
    "exec": Builtin(SHELL, "command", ("workdir",)),
    "read": Builtin(READ, "path", ("offset", "limit")),
    "write": Builtin(WRITE, "path", ("content",)),
    "edit": Builtin(EDIT, "path", ("edits", "oldText", "newText")),
    "ls": Builtin(LIST, "path"),
    # ZeroClaw (its documentation)
    "shell": Builtin(SHELL, "command"),
    "file_read": Builtin(READ, "path"),
    "file_write": Builtin(WRITE, "path", ("content",)),
}


@dataclass
class Action:
    """One built-in tool call: its kind, the command or path, the other arguments kept."""

    kind: str
    target: str
    extra: dict[str, Any] = field(default_factory=dict)


def action(name: str, arguments: dict[str, Any]) -> Action | None:
    """What the tool call `name(arguments)` was, when `name` is a harness's own tool; else None
    (a task's tool, a harness's bookkeeping tool such as a plan or a question to the user)."""
    found = BUILTINS.get(name)
    if found is None or not isinstance(arguments, dict):
        return None
    target = arguments.get(found.key)
    if found.kind == READ and target is None:
        target = arguments.get("file_path")
    return Action(found.kind, target if isinstance(target, str) else "",
                  {k: arguments[k] for k in found.keep if k in arguments})


_COMMAND = r"(?:task-tool|python3?\s+\S*task_tool\.py)"
_HEREDOC = re.compile(r"\A\s*" + _COMMAND + r"\s+(\S+)\s+-\s*<<-?\s*(['\"]?)(\w+)\2[ \t]*\n(.*?)\n[ \t]*\3\s*\Z", re.S)


def task_tool_call(command: str) -> str | None:
    """The tool name, when the shell command is one call of a task tool and nothing else:
    `task-tool NAME ['JSON']`, `task-tool NAME - <<'EOF' ... EOF` (or task_tool.py run by python3)."""
    if not isinstance(command, str):
        return None
    found = _HEREDOC.match(command)
    if found:
        return found.group(1)
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return None
    if any(w and set(w) <= set("();<>|&") for w in words) or "\n" in command.strip():
        return None  # a list, a pipe or a redirection: more than the call
    if words[:1] == ["task-tool"]:
        rest = words[1:]
    elif len(words) > 1 and words[0] in ("python3", "python") and words[1].endswith("task_tool.py"):
        rest = words[2:]
    else:
        return None
    if not 1 <= len(rest) <= 2 or rest[0].startswith("-"):
        return None
    return rest[0]
