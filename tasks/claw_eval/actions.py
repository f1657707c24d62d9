"""The agent's own shell and file actions as Claw-Eval's runner records them.

Claw-Eval's runner serves its built-in sandbox tools (`Bash`, `Read`, `Write`, `Edit`, `Glob`, ...)
as tool calls: each is a `tool_use` of that name in the messages and a `ToolDispatch` (status 200,
`local://sandbox/<name>`) among the task's own, in order, so a grader that counts `Bash` calls
sees them. orchard's harnesses have their own tools for that (orchard_cli.tools.builtins); this
module renames them in the rebuilt messages and lists them as sandbox calls, each placed after
the number of the task's dispatches made before it (`after`), which `grading.trace_dispatches`
interleaves with the task's dispatches:

- a task tool the harness called over MCP is matched with the next recorded dispatch of that tool;
- a shell command takes the dispatches it made (orchard's bash agent calls the task's tools with
  `task-tool` from its commands: the next recorded dispatches whose tool the command names);
- a shell command that is only one `task-tool` call is that call: its `tool_use` becomes the task
  tool's (its arguments, its result), and no `Bash` is recorded;
- what is neither a task tool nor a harness's shell or file tool (a plan, a question) is left as is.
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchard_cli.evidence import Dispatch
from orchard_cli.tools.builtins import EDIT, LIST, READ, SHELL, WRITE, action, task_tool_call

RUNNER_NAMES = {SHELL: "Bash", READ: "Read", WRITE: "Write", EDIT: "Edit", LIST: "Glob"}
_EXIT = re.compile(r"(?:exit code|exited with code)\s*:?\s*(-?\d+)", re.I)


def _runner_input(kind: str, target: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The built-in tool's input, in the runner's argument names."""
    if kind == SHELL:
        return {"command": target}
    if kind == LIST:
        return {"pattern": "*", "path": target}
    if kind == EDIT and "edits" not in extra and "oldText" not in extra and "\n" in target:
        return {"patch": target}  # apply_patch: the patch itself
    return {"file_path": target, **{k: v for k, v in extra.items() if k != "workdir"}}


def _body(kind: str, output: str) -> dict[str, Any]:
    if kind == SHELL:
        code = _EXIT.search(output[:200])
        return {"exit_code": int(code.group(1)) if code else None, "stdout": output, "stderr": ""}
    return {"output": output}


def _results(messages: list[dict[str, Any]], index: int) -> dict[str, dict[str, Any]]:
    """tool_use id -> its tool_result block, for the calls of the assistant message at `index`
    (their results follow it: ids need only be unique within one reply)."""
    after = messages[index + 1] if index + 1 < len(messages) else None
    if after is None or after["role"] != "user":
        return {}
    return {b["tool_use_id"]: b for b in after["content"] if b["type"] == "tool_result"}


def _text(block: dict[str, Any] | None) -> str:
    return "".join(p.get("text") or "" for p in (block or {}).get("content") or ())


def sandbox_calls(messages: list[dict[str, Any]], dispatches: list[Dispatch],
                  known: set[str]) -> list[dict[str, Any]]:
    """The built-in calls of `messages` (rebuilt from the harness's conversation), renamed there in
    place as the runner names them; returned as {after, tool_use_id, tool, input, body}."""
    used = [False] * len(dispatches)
    cursor = 0  # the task's dispatches accounted for so far
    found: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        results = _results(messages, index)
        for block in message["content"]:
            if block["type"] != "tool_use":
                continue
            if block["name"] in known:  # a task tool over MCP: its own dispatch
                index = next((i for i, d in enumerate(dispatches) if not used[i] and d.tool == block["name"]), None)
                if index is not None:
                    used[index] = True
                    cursor = max(cursor, index + 1)
                continue
            act = action(block["name"], block["input"])
            if act is None:
                continue
            made = []
            if act.kind == SHELL:
                while cursor < len(dispatches) and (used[cursor] or _names(act.target, dispatches[cursor].tool)):
                    if not used[cursor]:
                        used[cursor] = True
                        made.append(dispatches[cursor])
                    cursor += 1
                only = task_tool_call(act.target)
                if only is not None and len(made) == 1 and made[0].tool == only:
                    block["name"], block["input"] = only, dict(made[0].arguments)
                    result = results.get(block["id"])
                    if result is not None:
                        result["content"] = [{"type": "text", "text": json.dumps(made[0].result, ensure_ascii=False,
                                                                                 default=str)}]
                        result["is_error"] = (made[0].status or 200) >= 400
                    continue
            name = RUNNER_NAMES[act.kind]
            block["name"], block["input"] = name, _runner_input(act.kind, act.target, act.extra)
            found.append({"after": cursor, "tool_use_id": block["id"], "tool": name, "input": block["input"],
                          "body": _body(act.kind, _text(results.get(block["id"])))})
    return found


def _names(command: str, tool: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(tool)}(?![\w-])", command) is not None


def interleave(task_dispatches: list[dict[str, Any]], calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The task's dispatches (ToolDispatch dicts, in order) with the sandbox calls placed after
    `after` of them, as the runner's dispatch list."""
    out: list[dict[str, Any]] = []
    pending = sorted(calls, key=lambda c: c["after"])  # stable: calls at one place keep their order
    at = 0
    for index, item in enumerate(task_dispatches):
        while at < len(pending) and pending[at]["after"] <= index:
            out.append(_dispatch(pending[at]))
            at += 1
        out.append(item)
    out += [_dispatch(c) for c in pending[at:]]
    return out


def _dispatch(call: dict[str, Any]) -> dict[str, Any]:
    return {"tool_use_id": call["tool_use_id"], "tool_name": call["tool"], "endpoint_url": f"local://sandbox/{call['tool']}",
            "request_body": call["input"], "response_status": 200, "response_body": call["body"]}
