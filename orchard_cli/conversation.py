"""Recorded model calls -> the normalised conversation that training reads.

A harness speaks chat completions or the Responses API; either way the episode's conversation is
stored as OpenAI chat messages (system, user, assistant with `tool_calls`, tool) plus tool schemas
in chat form. The conversation is the request of the episode's main call (the latest successful
call among those with the longest conversation, so a short side call such as a title request does
not replace it) followed by that call's answer.

This module is a leaf of the core: it reads `CallRecord`s and never imports tasks or harnesses.
"""

from __future__ import annotations

import json
from typing import Any

from orchard_cli.proxy.calls import CallRecord
from orchard_cli.proxy.translate import NAMESPACE_SEP, TranslationError, responses_to_chat

_MESSAGE_KEYS = ("role", "content", "name", "tool_call_id", "tool_calls", "reasoning_content")


def _content(value: Any) -> Any:
    """Text-only content parts fold into one string; anything with an image stays as parts."""
    if not isinstance(value, list):
        return value
    if all(isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text") for p in value):
        return "".join(str(p.get("text") or "") for p in value)
    return value


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    return {"id": call.get("id") or "", "type": "function",
            "function": {"name": fn.get("name") or "", "arguments": _arguments(fn.get("arguments"))}}


def normalise_message(message: dict[str, Any]) -> dict[str, Any]:
    """One chat message with only the fields training uses, content as a string when it is text."""
    out: dict[str, Any] = {}
    for key in _MESSAGE_KEYS:
        if message.get(key) is None:
            continue
        if key == "content":
            out[key] = _content(message[key])
        elif key == "tool_calls":
            if message[key]:
                out[key] = [_tool_call(c) for c in message[key]]
        else:
            out[key] = message[key]
    role = {"developer": "system"}.get(out.get("role", ""), out.get("role", "user"))
    out["role"] = role
    out.setdefault("content", "" if role != "assistant" or "tool_calls" not in out else None)
    return out


def normalise_tools(tools: Any) -> list[dict[str, Any]]:
    """Chat tool schemas: {"type": "function", "function": {name, description, parameters}}."""
    out = []
    for tool in tools or ():
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function") if tool.get("type") == "function" and "function" in tool else None
        if fn is None:
            continue
        out.append({"type": "function", "function": {
            "name": fn.get("name") or "", "description": fn.get("description") or "",
            "parameters": fn.get("parameters") or {"type": "object", "properties": {}}}})
    return out


def _responses_answer(response: dict[str, Any]) -> dict[str, Any]:
    """A Responses `response` object -> one assistant chat message."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response.get("output") or ():
        kind = item.get("type")
        if kind == "message":
            text += [p.get("text") or p.get("refusal") or "" for p in item.get("content") or ()]
        elif kind == "reasoning":
            parts = (item.get("content") or []) + (item.get("summary") or [])
            reasoning += [p.get("text") or "" for p in parts]
        elif kind == "function_call":
            name = item.get("name")
            if item.get("namespace"):  # a namespace tool's function (Codex's MCP tools): as chat names it
                name = f"{item['namespace']}{NAMESPACE_SEP}{name}"
            calls.append({"id": item.get("call_id") or item.get("id"), "type": "function",
                          "function": {"name": name, "arguments": item.get("arguments") or ""}})
        elif kind == "custom_tool_call":
            calls.append({"id": item.get("call_id") or item.get("id"), "type": "function",
                          "function": {"name": item.get("name"),
                                       "arguments": json.dumps({"input": item.get("input") or ""})}})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = calls
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    return message


def _chat_answer(response: dict[str, Any]) -> dict[str, Any] | None:
    choices = response.get("choices") or []
    if not choices:
        return None
    message = dict(choices[0].get("message") or {})
    if not message.get("reasoning_content") and message.get("reasoning"):
        message["reasoning_content"] = message["reasoning"]
    message["role"] = "assistant"
    return message


def call_conversation(record: CallRecord) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools) of one call in chat form: its request, plus its answer when it has one."""
    request = record.request if isinstance(record.request, dict) else {}
    if record.endpoint == "responses":
        try:
            chat = responses_to_chat(request)
        except TranslationError:
            chat = {"messages": []}
    else:
        chat = request
    messages = [normalise_message(m) for m in chat.get("messages") or () if isinstance(m, dict)]
    answer = None
    if record.error is None and record.status == 200 and isinstance(record.response, dict):
        answer = (_responses_answer(record.response) if record.endpoint == "responses"
                  else _chat_answer(record.response))
    if answer is not None:
        messages.append(normalise_message(answer))
    return messages, normalise_tools(chat.get("tools"))


def _ok(record: CallRecord) -> bool:
    return record.error is None and record.status == 200 and record.response is not None


def main_call(records: list[CallRecord]) -> CallRecord | None:
    """The call whose conversation is the episode's: the latest successful call among those with
    the longest request; without any successful call, the latest call."""
    if not records:
        return None
    ok = [r for r in records if _ok(r)]
    if not ok:
        return records[-1]

    def length(record: CallRecord) -> int:
        return len(call_conversation(record)[0])

    longest = max(length(r) for r in ok)
    return [r for r in ok if length(r) == longest][-1]


def conversation(records: list[CallRecord]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools) of an episode in chat form; empty when no call was made."""
    call = main_call(records)
    return call_conversation(call) if call is not None else ([], [])
