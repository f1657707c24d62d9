"""Serve the Responses API from an upstream that only speaks chat completions.

`responses_to_chat` turns a Responses request into a chat request; `ResponsesStream` turns chat
chunks (or one whole completion) into the Responses event sequence and the final response object.
Every output item gets `response.output_item.done` before `response.completed`: the Codex CLI
silently does nothing otherwise. Custom (free-form) tools are carried as a function with one string
parameter `input`. Reasoning items in the input are dropped (chat has no slot for them).
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from orchard_cli.errors import UsageError
from orchard_cli.proxy.sse import encode_event

_PASS = ("temperature", "top_p", "parallel_tool_calls", "user", "seed", "stop",
         "frequency_penalty", "presence_penalty", "logprobs", "top_logprobs")


class TranslationError(UsageError):
    """A Responses request uses a feature that cannot be carried over chat completions."""


def _text_of(content: Any) -> Any:
    """Responses content parts -> a chat content string (or parts when an image is present)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts, has_image = [], False
    for part in content:
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "reasoning_text", "refusal"):
            parts.append({"type": "text", "text": part.get("text") or part.get("refusal") or ""})
        elif kind == "input_image":
            has_image = True
            url = part.get("image_url") or part.get("file_id") or ""
            parts.append({"type": "image_url", "image_url": {"url": url}})
    if has_image:
        return parts
    return "".join(p["text"] for p in parts)


def _custom_tool_names(tools: list[dict[str, Any]] | None) -> set[str]:
    return {t.get("name", "") for t in tools or () if t.get("type") == "custom"}


NAMESPACE_SEP = "__"
"""A namespace tool's functions go to chat as `<namespace>__<name>` (Codex's MCP tools:
`{"type": "namespace", "name": "mcp__task", "tools": [...]}`), and a chat call of that name comes
back as a function call with `namespace` and `name` apart, as the harness expects."""


def _namespaces(tools: list[dict[str, Any]] | None) -> dict[str, tuple[str, str]]:
    """chat name -> (namespace, name) for every function inside a namespace tool."""
    found: dict[str, tuple[str, str]] = {}
    for tool in tools or ():
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or ():
                if inner.get("type", "function") == "function" and inner.get("name"):
                    found[f"{tool.get('name', '')}{NAMESPACE_SEP}{inner['name']}"] = (tool.get("name", ""), inner["name"])
    return found


def _tools_to_chat(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    out = []
    for tool in tools or ():
        kind = tool.get("type")
        if kind == "namespace":
            out += _tools_to_chat([{**inner, "type": inner.get("type", "function"),
                                    "name": f"{tool.get('name', '')}{NAMESPACE_SEP}{inner.get('name', '')}"}
                                   for inner in tool.get("tools") or () if inner.get("type", "function") == "function"])
        elif kind == "function":
            fn = {"name": tool["name"], "description": tool.get("description") or "",
                  "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
            out.append({"type": "function", "function": fn})
        elif kind == "custom":
            params = {"type": "object", "required": ["input"],
                      "properties": {"input": {"type": "string", "description": "the raw input"}}}
            out.append({"type": "function", "function": {
                "name": tool["name"], "description": tool.get("description") or "", "parameters": params}})
        # hosted tools (web_search, file_search, local_shell, ...) have no chat equivalent: dropped
    return out


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    system: list[str] = [body["instructions"]] if body.get("instructions") else []

    def assistant() -> dict[str, Any]:
        """Consecutive assistant items (text, tool calls) fold into one chat message."""
        if not messages or messages[-1]["role"] != "assistant":
            messages.append({"role": "assistant", "content": None})
        return messages[-1]

    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items or ():
        kind = item.get("type", "message")
        if kind == "message":
            role = {"developer": "system"}.get(item.get("role", "user"), item.get("role", "user"))
            content = _text_of(item.get("content"))
            if role == "system" and not messages and isinstance(content, str):
                system.append(content)
            elif role == "assistant":
                msg = assistant()
                msg["content"] = (msg["content"] or "") + (content if isinstance(content, str) else "")
            else:
                messages.append({"role": role, "content": content})
        elif kind in ("function_call", "custom_tool_call"):
            args = item.get("arguments", "") if kind == "function_call" else json.dumps(
                {"input": item.get("input", "")})
            msg = assistant()
            name = item.get("name", "")
            if item.get("namespace"):
                name = f"{item['namespace']}{NAMESPACE_SEP}{name}"
            msg.setdefault("tool_calls", []).append({
                "id": item.get("call_id") or item.get("id"), "type": "function",
                "function": {"name": name, "arguments": args}})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output", "")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text_of(output)})
        # reasoning, web_search_call, ... : no chat equivalent
    if system:
        messages.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return messages


def responses_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request body -> an equivalent chat completions request body."""
    if body.get("previous_response_id"):
        raise TranslationError("previous_response_id needs a Responses upstream; this one speaks chat",
                               hint="send the whole conversation as input items (store=false)")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": _messages(body)}
    tools = _tools_to_chat(body.get("tools"))
    if tools:
        chat["tools"] = tools
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("name"):
            chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        elif isinstance(choice, str):
            chat["tool_choice"] = choice
    for key in _PASS:
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("max_output_tokens"):
        chat["max_tokens"] = body["max_output_tokens"]
    fmt = (body.get("text") or {}).get("format") or {}
    if fmt.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}}
    elif fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def usage_to_responses(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0},
        "total_tokens": usage.get("total_tokens") or prompt + completion,
    }


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class ResponsesStream:
    """Chat chunks in, Responses events (SSE bytes) out; `response` is the final object."""

    def __init__(self, request: dict[str, Any]) -> None:
        self._custom = _custom_tool_names(request.get("tools"))
        self._namespaced = _namespaces(request.get("tools"))
        self._seq = 0
        self._open: list[dict[str, Any]] = []  # items added but not done, in output order
        self._text: dict[str, Any] | None = None
        self._reasoning: dict[str, Any] | None = None
        self._tools: dict[int, dict[str, Any]] = {}
        self._usage: dict[str, Any] | None = None
        self._finish: str | None = None
        self.response: dict[str, Any] = {
            "id": _id("resp"), "object": "response", "created_at": int(time.time()),
            "status": "in_progress", "model": request.get("model"), "output": [],
            "instructions": request.get("instructions"), "tools": request.get("tools") or [],
            "tool_choice": request.get("tool_choice", "auto"),
            "parallel_tool_calls": request.get("parallel_tool_calls", True),
            "incomplete_details": None, "error": None, "usage": None}

    def _ev(self, kind: str, **fields: Any) -> bytes:
        self._seq += 1
        return encode_event({"type": kind, "sequence_number": self._seq - 1, **fields}, kind)

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": list(self.response["output"])}

    def start(self) -> list[bytes]:
        snap = self._snapshot()
        return [self._ev("response.created", response=snap), self._ev("response.in_progress", response=snap)]

    def _add(self, item: dict[str, Any]) -> tuple[int, bytes]:
        index = len(self.response["output"])
        self.response["output"].append(item)
        item["_index"] = index
        self._open.append(item)
        shown = {k: v for k, v in item.items() if not k.startswith("_")}
        return index, self._ev("response.output_item.added", output_index=index, item=shown)

    def _close(self, item: dict[str, Any]) -> list[bytes]:
        index = item.pop("_index")
        self._open.remove(item)
        out: list[bytes] = []
        kind = item["type"]
        if kind in ("message", "reasoning"):
            part_kind, text_kind = (("output_text", "response.output_text") if kind == "message"
                                    else ("reasoning_text", "response.reasoning_text"))
            text = "".join(item.pop("_parts"))
            part = {"type": part_kind, "text": text}
            if kind == "message":
                part["annotations"] = []
            item["content"] = [part]
            out.append(self._ev(f"{text_kind}.done", item_id=item["id"], output_index=index,
                                content_index=0, text=text))
            out.append(self._ev("response.content_part.done", item_id=item["id"], output_index=index,
                                content_index=0, part=part))
        elif kind == "function_call":
            item["arguments"] = "".join(item.pop("_parts"))
            out.append(self._ev("response.function_call_arguments.done", item_id=item["id"],
                                output_index=index, arguments=item["arguments"]))
        elif kind == "custom_tool_call":
            out.append(self._ev("response.custom_tool_call_input.done", item_id=item["id"],
                                output_index=index, input=item["input"]))
        item["status"] = "completed"
        out.append(self._ev("response.output_item.done", output_index=index, item=item))
        return out

    def _open_text(self, kind: str) -> tuple[dict[str, Any], list[bytes]]:
        item: dict[str, Any]
        if kind == "message":
            item = {"type": "message", "id": _id("msg"), "status": "in_progress", "role": "assistant",
                    "content": [], "_parts": []}
            part = {"type": "output_text", "text": "", "annotations": []}
        else:
            item = {"type": "reasoning", "id": _id("rs"), "summary": [], "content": [], "_parts": []}
            part = {"type": "reasoning_text", "text": ""}
        index, added = self._add(item)
        return item, [added, self._ev("response.content_part.added", item_id=item["id"],
                                      output_index=index, content_index=0, part=part)]

    def feed(self, chunk: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        if chunk.get("weight_version") is not None:  # the server's weights (orchard serve, SGLang)
            self.response["weight_version"] = chunk["weight_version"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                if self._reasoning is None:
                    self._reasoning, events = self._open_text("reasoning")
                    out += events
                self._reasoning["_parts"].append(reasoning)
                out.append(self._ev("response.reasoning_text.delta", item_id=self._reasoning["id"],
                                    output_index=self._reasoning["_index"], content_index=0, delta=reasoning))
            if delta.get("content"):
                if self._reasoning is not None and self._reasoning in self._open:
                    out += self._close(self._reasoning)
                if self._text is None:
                    self._text, events = self._open_text("message")
                    out += events
                self._text["_parts"].append(delta["content"])
                out.append(self._ev("response.output_text.delta", item_id=self._text["id"],
                                    output_index=self._text["_index"], content_index=0, delta=delta["content"]))
            for call in delta.get("tool_calls") or ():
                out += self._tool_delta(call)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return out

    def _tool_delta(self, call: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        for item in (self._reasoning, self._text):
            if item is not None and item in self._open:
                out += self._close(item)
        fn = call.get("function") or {}
        slot = self._tools.setdefault(call.get("index", 0), {"id": None, "name": "", "buf": [], "item": None})
        slot["id"] = slot["id"] or call.get("id")
        slot["name"] = slot["name"] or fn.get("name") or ""
        if fn.get("arguments"):
            slot["buf"].append(fn["arguments"])
        if slot["item"] is None and slot["name"] and slot["name"] not in self._custom:
            item = {"type": "function_call", "id": _id("fc"), "call_id": slot["id"] or _id("call"),
                    "name": slot["name"], "arguments": "", "status": "in_progress", "_parts": []}
            if slot["name"] in self._namespaced:
                item["namespace"], item["name"] = self._namespaced[slot["name"]]
            slot["item"] = item
            _, added = self._add(item)
            out.append(added)
        item = slot["item"]
        if item is not None and slot["buf"]:
            delta, slot["buf"] = "".join(slot["buf"]), []
            item["_parts"].append(delta)
            out.append(self._ev("response.function_call_arguments.delta", item_id=item["id"],
                                output_index=item["_index"], delta=delta))
        return out

    def finish(self) -> list[bytes]:
        out: list[bytes] = []
        for slot in self._tools.values():  # custom tools are emitted whole, at the end
            if slot["item"] is None:
                raw = "".join(slot["buf"])
                try:
                    value = json.loads(raw).get("input", raw) if raw else ""
                except (ValueError, AttributeError):
                    value = raw
                item = {"type": "custom_tool_call", "id": _id("ctc"), "call_id": slot["id"] or _id("call"),
                        "name": slot["name"], "input": value if isinstance(value, str) else json.dumps(value),
                        "status": "in_progress"}
                slot["item"] = item
                _, added = self._add(item)
                out.append(added)
        if not self.response["output"]:
            self._text, events = self._open_text("message")
            out += events
        for item in list(self._open):
            out += self._close(item)
        self.response["usage"] = usage_to_responses(self._usage)
        if self._finish == "length":
            self.response["status"] = "incomplete"
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
            out.append(self._ev("response.incomplete", response=self.response))
        else:
            self.response["status"] = "completed"
            out.append(self._ev("response.completed", response=self.response))
        return out

    def fail(self, error: Any) -> bytes:
        """The upstream reported an error mid-stream: end with `response.failed`."""
        message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
        for item in self._open:
            for key in ("_index", "_parts"):
                item.pop(key, None)
        self.response["status"] = "failed"
        self.response["error"] = {"code": "server_error", "message": message}
        return self._ev("response.failed", response=self.response)


def completion_as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """A whole chat.completion as one chunk whose delta carries the entire message."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    delta = {k: message.get(k) for k in ("content", "reasoning_content", "reasoning") if message.get(k)}
    delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(message.get("tool_calls") or ())]
    chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason")}],
             "usage": completion.get("usage")}
    if completion.get("weight_version") is not None:
        chunk["weight_version"] = completion["weight_version"]
    return chunk


def chat_completion_to_response(completion: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """A whole chat.completion -> a whole Responses `response` object."""
    stream = ResponsesStream(request)
    stream.feed(completion_as_chunk(completion))
    stream.finish()
    if completion.get("model"):
        stream.response["model"] = completion["model"]
    return stream.response
