"""orchard's tool-call format, for models whose chat template has none (SmolLM2 among them).

Prompt. When a request offers tools (and `tool_choice` is not "none"), orchard appends this to the
system message (making one when there is none):

    # Tools

    You can call tools. To call a tool, write exactly:
    <tool_call>
    {"name": "TOOL_NAME", "arguments": {"ARGUMENT": "VALUE"}}
    </tool_call>
    and stop. The result comes back in a message that starts with <tool_response>.

    Available tools:
    - exec_command: Runs a command in a shell.
      arguments: {"cmd": "string, required: the command", "workdir": "string"}

History. An assistant message's `tool_calls` are written back after its text in the same markup,
one `<tool_call>` block each; tool results (role `tool`) become one user message holding one
`<tool_response>\\nRESULT\\n</tool_response>` block per result, in order. `developer` messages count
as system messages. This is the same markup as Qwen2.5/Hermes, so a student trained on it learns a
common format; `render_messages` is also what training uses to turn a trajectory into text.

Parsing a reply (`parse_reply`):
1. Every `<tool_call>JSON</tool_call>` block is one call. JSON is an object with `name` (one of the
   offered tools) and `arguments` (an object, or a string holding one; absent means {}). A last
   block without its closing tag counts when its JSON is complete and the reply was not cut off by
   max_tokens. The text outside the blocks is the message content (None when blank). A reply
   ends where the model starts writing a `<tool_response>` itself (results come from the tools).
2. With no `<tool_call>` in the reply, and a tool named bash, exec, exec_command or shell offered,
   the first fenced block tagged bash, sh or shell, or untagged (```bash ... ```), is a call to it: the
   script goes into its `cmd` or `command` parameter (whichever its schema has; an array parameter
   gets ["bash", "-lc", SCRIPT]). Small models write these unprompted.
3. A malformed call (JSON that does not parse or is not an object, an unknown tool name, arguments
   that are not an object, a block cut off by max_tokens) makes no call at all, not even the
   well-formed others: the reply comes back as plain content followed by
   `\\n\\n[orchard: tool call not understood: REASON. Write each call as <tool_call>{"name": "TOOL",
   "arguments": {...}}</tool_call>.]` (on one line), with finish_reason "stop" (or "length"). A
   harness that carries on sends this back as the assistant's turn, so the model reads it next time.

`tool_choice`: "none" renders no tools and parses nothing; "required" starts the reply with
`<tool_call>\\n{"name": "`; a named function starts it with `<tool_call>\\n{"name": "NAME",
"arguments": `. That forced start is part of the reply that is parsed.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN = "<tool_response>"
SHELL_TOOLS = ("exec_command", "exec", "bash", "shell")
NOTE = ("\n\n[orchard: tool call not understood: {reason}. Write each call as "
        '<tool_call>{{"name": "TOOL", "arguments": {{...}}}}</tool_call>.]')
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*$", re.MULTILINE)
SHELL_TAGS = ("bash", "sh", "shell", "")
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        if isinstance(part, dict):
            parts.append(part.get("text") or ("[image]" if part.get("type") in ("image_url", "input_image") else ""))
        else:
            parts.append(str(part))
    return "".join(parts)


def _functions(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    out = []
    for tool in tools or ():
        fn = tool.get("function") if tool.get("type", "function") == "function" else None
        if isinstance(fn, dict) and fn.get("name"):
            out.append(fn)
    return out


def _short(text: str, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def describe_tools(tools: list[dict[str, Any]]) -> str:
    """The tools section of the system prompt (see the module docstring)."""
    lines = ["# Tools", "", "You can call tools. To call a tool, write exactly:", OPEN,
             '{"name": "TOOL_NAME", "arguments": {"ARGUMENT": "VALUE"}}', CLOSE,
             "and stop. The result comes back in a message that starts with <tool_response>.", "",
             "Available tools:"]
    for fn in _functions(tools):
        params = fn.get("parameters") or {}
        required = set(params.get("required") or ())
        args = {}
        for name, schema in (params.get("properties") or {}).items():
            kind = schema.get("type", "any") if isinstance(schema, dict) else "any"
            kind = "/".join(kind) if isinstance(kind, list) else str(kind)
            note = kind + (", required" if name in required else "")
            desc = _short(schema.get("description", ""), 100) if isinstance(schema, dict) else ""
            args[name] = f"{note}: {desc}" if desc else note
        lines.append(f"- {fn['name']}: {_short(fn.get('description', ''), 400)}")
        lines.append(f"  arguments: {json.dumps(args, ensure_ascii=False)}")
    return "\n".join(lines)


def _call_markup(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    raw = fn.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
    except ValueError:
        args = raw
    body = json.dumps({"name": fn.get("name", ""), "arguments": args}, ensure_ascii=False)
    return f"{OPEN}\n{body}\n{CLOSE}"


def render_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    tool_choice: Any = None) -> list[dict[str, str]]:
    """OpenAI chat messages (+ tools) -> plain {role, content} messages for a ChatML template."""
    offered = _functions(tools) if tool_choice != "none" else []
    system: list[str] = []
    out: list[dict[str, str]] = []
    for msg in messages:
        role = msg.get("role", "user")
        text = _text(msg.get("content"))
        if role in ("system", "developer"):
            if out:  # a system message in the middle of a conversation
                out.append({"role": "system", "content": text})
            else:
                system.append(text)
        elif role == "assistant":
            blocks = [_call_markup(call) for call in msg.get("tool_calls") or ()]
            out.append({"role": "assistant", "content": "\n".join(([text] if text else []) + blocks)})
        elif role in ("tool", "function"):
            block = f"{RESPONSE_OPEN}\n{text}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith(RESPONSE_OPEN) \
                    and out[-1]["content"].endswith("</tool_response>"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
        else:
            out.append({"role": "user", "content": text})
    if offered:
        system.append(describe_tools(tools or []))
        if len(system) == 1:
            system.insert(0, "You are a helpful assistant.")
    if system:
        out.insert(0, {"role": "system", "content": "\n\n".join(s for s in system if s)})
    return out


def forced_start(tools: list[dict[str, Any]] | None, tool_choice: Any) -> str:
    """The text a reply must start with under `tool_choice` ('' when free)."""
    if not _functions(tools):
        return ""
    if tool_choice == "required":
        return f'{OPEN}\n{{"name": "'
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
        if name:
            return f'{OPEN}\n{{"name": {json.dumps(name)}, "arguments": '
    return ""


def markers(tools: list[dict[str, Any]] | None, tool_choice: Any = None) -> tuple[str, ...]:
    """Strings after which a streamed reply is held back until it is complete and parsed."""
    if tool_choice == "none" or not _functions(tools):
        return ()
    return (OPEN, "```") if shell_tool(tools) else (OPEN,)


def shell_tool(tools: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    names = {fn["name"]: fn for fn in _functions(tools)}
    return next((names[n] for n in SHELL_TOOLS if n in names), None)


def _shell_arguments(fn: dict[str, Any], script: str) -> dict[str, Any]:
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    key = next((k for k in ("cmd", "command", "script", "input", "code") if k in props), None)
    if key is None:
        key = next((k for k in params.get("required") or () if (props.get(k) or {}).get("type") == "string"),
                   "command")
    if (props.get(key) or {}).get("type") == "array":
        return {key: ["bash", "-lc", script]}
    return {key: script}


@dataclass
class ParsedReply:
    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def _new_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _blank_none(text: str) -> str | None:
    return text if text.strip() else None


def _parse_block(body: str, closed: bool, truncated: bool, offered: set[str]) -> dict[str, Any] | str:
    """One block -> a call, or the reason it is malformed."""
    if not closed and truncated:
        return f"the reply was cut off (max_tokens) inside {OPEN}"
    try:
        obj = json.loads(body)
    except ValueError:
        return f"the text inside {OPEN} is not valid JSON"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return 'the call must be a JSON object with a "name"'
    if obj["name"] not in offered:
        return f"there is no tool named {obj['name']!r} (tools: {', '.join(sorted(offered))})"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return f"the arguments of {obj['name']} are a string that is not JSON"
    if not isinstance(args, dict):
        return f"the arguments of {obj['name']} must be a JSON object"
    return _new_call(obj["name"], args)


def parse_reply(text: str, tools: list[dict[str, Any]] | None, tool_choice: Any = None,
                truncated: bool = False) -> ParsedReply:
    """A model's reply text -> content + OpenAI tool_calls, or content + the error note."""
    functions = _functions(tools) if tool_choice != "none" else []
    if not functions:
        return ParsedReply(_blank_none(text))
    offered = {fn["name"] for fn in functions}
    if OPEN in text:
        calls: list[dict[str, Any]] = []
        errors: list[str] = []
        outside, pos = [], 0
        for match in _BLOCK.finditer(text):
            outside.append(text[pos:match.start()])
            pos = match.end()
            result = _parse_block(match.group(1).strip(), bool(match.group(2)), truncated, offered)
            if isinstance(result, dict):
                calls.append(result)
            else:
                errors.append(result)
        outside.append(text[pos:])
        if errors:
            return ParsedReply(text + NOTE.format(reason=errors[0]), [], errors[0])
        return ParsedReply(_blank_none("".join(outside)), calls)
    shell = shell_tool(tools)
    block = _first_shell_block(text) if shell is not None else None
    if shell is not None and block is not None:
        start, end, script, closed = block
        if (closed or not truncated) and script.strip():
            call = _new_call(shell["name"], _shell_arguments(shell, script.strip()))
            return ParsedReply(_blank_none(text[:start] + text[end:]), [call])
    return ParsedReply(_blank_none(text))


def _first_shell_block(text: str) -> tuple[int, int, str, bool] | None:
    """(start, end, body, closed) of the first fenced block tagged bash/sh/shell or untagged."""
    fences = list(_FENCE.finditer(text))
    i = 0
    while i < len(fences):
        opening = fences[i]
        closing = fences[i + 1] if i + 1 < len(fences) and not fences[i + 1].group(1) else None
        body_end = closing.start() if closing else len(text)
        if opening.group(1).lower() in SHELL_TAGS:
            body = text[opening.end() + 1:body_end] if opening.end() < len(text) else ""
            return opening.start(), (closing.end() if closing else len(text)), body, closing is not None
        i += 2
    return None


def safe_length(text: str, holds: tuple[str, ...], hold_space: bool = False) -> int:
    """How much of a growing reply can be streamed now: up to the first marker in `holds`, and not a
    tail that could still become one (nor trailing whitespace when `hold_space`)."""
    cut = len(text)
    for marker in holds:
        found = text.find(marker)
        if found >= 0:
            cut = min(cut, found)
            continue
        for size in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:size]):
                cut = min(cut, len(text) - size)
                break
    if hold_space:
        while cut > 0 and text[cut - 1].isspace():
            cut -= 1
    return cut
