"""Server-sent events: decode a byte stream into events, and assemble streamed calls into one
response shaped like the non-streamed answer (so a record looks the same either way)."""

from __future__ import annotations

import json
from typing import Any


def encode_event(payload: dict[str, Any], event: str | None = None) -> bytes:
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


DONE = b"data: [DONE]\n\n"


class SSEDecoder:
    """Incremental: feed bytes as they arrive, get back complete (event, data) pairs."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        self._buf += chunk
        if b"\r" in self._buf:
            self._buf = self._buf.replace(b"\r\n", b"\n")
        out: list[tuple[str | None, str]] = []
        while True:
            cut = self._buf.find(b"\n\n")
            if cut < 0:
                return out
            block, self._buf = self._buf[:cut], self._buf[cut + 2:]
            parsed = _parse_block(block)
            if parsed is not None:
                out.append(parsed)

    def tail(self) -> list[tuple[str | None, str]]:
        """Whatever complete-looking block is left when the stream ends without a blank line."""
        block, self._buf = self._buf.strip(b"\n"), b""
        parsed = _parse_block(block) if block else None
        return [parsed] if parsed else []


def _parse_block(block: bytes) -> tuple[str | None, str] | None:
    event: str | None = None
    data: list[str] = []
    for raw in block.split(b"\n"):
        line = raw.decode("utf-8", "replace")
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" ") if line[5:6] == " " else line[5:])
        elif line.startswith("event:"):
            event = line[6:].strip()
    if not data:
        return None
    return event, "\n".join(data)


def _payload(block: bytes) -> bytes | str | None:
    """The data of one event block; the common one-line `data:` forms without decoding lines."""
    if block.startswith(b"data: "):
        rest = block[6:]
    else:
        cut = block.find(b"\ndata: ")
        rest = block[cut + 7:] if cut >= 0 and block.startswith(b"event:") else b"\n"
    if b"\n" not in rest:
        return rest
    parsed = _parse_block(block)
    return parsed[1] if parsed else None


def sse_json(blob: bytes) -> list[dict[str, Any]]:
    """All JSON payloads of a complete stream (skips [DONE], comments and unparsable data)."""
    if b"\r" in blob:
        blob = blob.replace(b"\r\n", b"\n")
    out = []
    for block in blob.split(b"\n\n"):
        block = block.strip(b"\n")
        payload = _payload(block) if block else None
        if not payload or payload in (b"[DONE]", "[DONE]"):
            continue
        try:
            value = json.loads(payload)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


class ChatAssembler:
    """Folds chat.completion.chunk objects into one chat.completion (choice 0 and others)."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.usage: dict[str, Any] | None = None
        self.prompt_token_ids: list[int] | None = None
        self._choices: dict[int, dict[str, Any]] = {}

    def feed(self, chunk: dict[str, Any]) -> None:
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint")}
        if chunk.get("weight_version") is not None:  # the last one said wins (the weights that finished)
            self.head["weight_version"] = chunk["weight_version"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_token_ids = chunk["prompt_token_ids"]
        for choice in chunk.get("choices") or ():
            self._feed_choice(choice)

    def _feed_choice(self, choice: dict[str, Any]) -> None:
        slot = self._choices.setdefault(choice.get("index", 0), {
            "content": [], "reasoning": [], "tools": {}, "finish_reason": None,
            "logprobs": [], "token_ids": [], "role": "assistant"})
        delta = choice.get("delta") or {}
        if delta.get("role"):
            slot["role"] = delta["role"]
        if delta.get("content"):
            slot["content"].append(delta["content"])
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            slot["reasoning"].append(reasoning)
        for call in delta.get("tool_calls") or ():
            tool = slot["tools"].setdefault(call.get("index", 0), {"id": None, "name": "", "args": []})
            tool["id"] = call.get("id") or tool["id"]
            fn = call.get("function") or {}
            if fn.get("name") and not tool["name"]:
                tool["name"] = fn["name"]
            if fn.get("arguments"):
                tool["args"].append(fn["arguments"])
        if choice.get("finish_reason"):
            slot["finish_reason"] = choice["finish_reason"]
        logprobs = choice.get("logprobs") or {}
        if logprobs.get("content"):
            slot["logprobs"].extend(logprobs["content"])
        if choice.get("token_ids"):
            slot["token_ids"].extend(choice["token_ids"])

    def result(self) -> dict[str, Any]:
        choices = []
        for index in sorted(self._choices):
            slot = self._choices[index]
            message: dict[str, Any] = {"role": slot["role"], "content": "".join(slot["content"]) or None}
            if slot["reasoning"]:
                message["reasoning_content"] = "".join(slot["reasoning"])
            if slot["tools"]:
                message["tool_calls"] = [
                    {"id": t["id"], "type": "function",
                     "function": {"name": t["name"], "arguments": "".join(t["args"])}}
                    for _, t in sorted(slot["tools"].items())]
            choice: dict[str, Any] = {"index": index, "message": message,
                                      "finish_reason": slot["finish_reason"]}
            if slot["logprobs"]:
                choice["logprobs"] = {"content": slot["logprobs"]}
            if slot["token_ids"]:
                choice["token_ids"] = slot["token_ids"]
            choices.append(choice)
        out = {**self.head, "object": "chat.completion", "choices": choices, "usage": self.usage}
        if self.prompt_token_ids is not None:
            out["prompt_token_ids"] = self.prompt_token_ids
        return out


def assemble_chat_stream(blob: bytes) -> dict[str, Any]:
    assembler = ChatAssembler()
    for chunk in sse_json(blob):
        assembler.feed(chunk)
    return assembler.result()


def assemble_responses_stream(blob: bytes) -> dict[str, Any] | None:
    """The final response object of a Responses stream (from its terminal event), if any."""
    final = None
    for event in sse_json(blob):
        if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            final = event.get("response")
    return final
