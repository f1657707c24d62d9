"""The aiohttp app behind the scripted endpoint: replays replies as chat completions or Responses,
streamed or not, with faults on demand (error status, slow chunks, a cut stream, no answer).

The app asks its endpoint for each reply with `reply_for(headers, chat)` (the request's headers
and its body in chat form): the scripted endpoint hands out its next reply whatever was asked, the
demonstrator `gold` (gold.py) the next move of the episode the call belongs to."""

from __future__ import annotations

import asyncio
import json
import re
import time
import zlib
from typing import TYPE_CHECKING, Any

from aiohttp import web

from orchard_cli.proxy.sse import DONE, encode_event
from orchard_cli.proxy.translate import ResponsesStream, chat_completion_to_response, responses_to_chat

if TYPE_CHECKING:
    from orchard_cli.models.scripted import ScriptedReply

_PIECE = re.compile(r"\s*\S+|\s+")


def pieces(text: str) -> list[str]:
    """Word-ish 'tokens': each streamed content chunk carries one."""
    return _PIECE.findall(text or "")


def token_id(piece: str) -> int:
    return zlib.crc32(piece.encode()) % 49152


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for msg in reversed(messages):
        if msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content or ""
    return ""


class Turn:
    """One reply rendered for one chat request: whole, or as a list of chunks."""

    def __init__(self, reply: ScriptedReply, chat: dict[str, Any], model: str) -> None:
        self.reply, self.chat, self.model = reply, chat, model
        self.id = f"chatcmpl-scripted-{time.monotonic_ns()}"
        self.content = f"echo: {_last_user_text(chat.get('messages') or [])}" if reply.echo else reply.content
        self.calls = [
            {"id": call.id or f"call_{i}_{token_id(call.name)}", "type": "function",
             "function": {"name": call.name, "arguments": call.arguments if isinstance(call.arguments, str)
                          else json.dumps(call.arguments)}}
            for i, call in enumerate(reply.tool_calls)]
        self.finish = reply.finish_reason or ("tool_calls" if self.calls else "stop")
        prompt = json.dumps(chat.get("messages") or [])
        self.prompt_pieces = pieces(prompt)
        completion = len(pieces(self.content)) + sum(len(pieces(c["function"]["arguments"])) for c in self.calls)
        self.usage = {"prompt_tokens": len(self.prompt_pieces), "completion_tokens": completion,
                      "total_tokens": len(self.prompt_pieces) + completion}
        self.want_logprobs = bool(chat.get("logprobs"))
        self.want_ids = bool(chat.get("return_token_ids"))

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": int(time.time()), "model": self.model}

    def _extras(self, choice: dict[str, Any], words: list[str]) -> dict[str, Any]:
        if self.want_logprobs and words:
            choice["logprobs"] = {"content": [
                {"token": w, "logprob": -0.01 * (1 + token_id(w) % 50), "bytes": list(w.encode()),
                 "top_logprobs": []} for w in words]}
        if self.want_ids and words:
            choice["token_ids"] = [token_id(w) for w in words]
        return choice

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.reply.reasoning:
            message["reasoning_content"] = self.reply.reasoning
        if self.calls:
            message["tool_calls"] = self.calls
        choice = self._extras({"index": 0, "message": message, "finish_reason": self.finish},
                              pieces(self.content))
        out = {**self._head("chat.completion"), "choices": [choice], "usage": self.usage}
        if self.want_ids:
            out["prompt_token_ids"] = [token_id(p) for p in self.prompt_pieces]
        return out

    def chunks(self) -> list[dict[str, Any]]:
        head = self._head("chat.completion.chunk")
        first: dict[str, Any] = {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        if self.want_ids:
            first["prompt_token_ids"] = [token_id(p) for p in self.prompt_pieces]
        out = [first]
        for word in pieces(self.reply.reasoning or ""):
            out.append({**head, "choices": [{"index": 0, "delta": {"reasoning_content": word}}]})
        for word in pieces(self.content):
            out.append({**head, "choices": [self._extras({"index": 0, "delta": {"content": word}}, [word])]})
        for i, call in enumerate(self.calls):
            args = call["function"]["arguments"]
            half = len(args) // 2
            out.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "id": call["id"], "type": "function",
                 "function": {"name": call["function"]["name"], "arguments": ""}}]}}]})
            for part in (args[:half], args[half:]):
                if part:
                    out.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [
                        {"index": i, "function": {"arguments": part}}]}}]})
        out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": self.finish}]})
        if (self.chat.get("stream_options") or {}).get("include_usage"):
            out.append({**head, "choices": [], "usage": self.usage})
        return out


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    headers = {"retry-after": "0"} if status == 429 else None
    return web.json_response({"error": {"message": message, "type": kind, "code": status}},
                             status=status, headers=headers)


PREFLIGHT_HEADER = "X-Orchard-Preflight"
"""Sent by `orchard_cli.preflight` with its 1-token call: a scripted endpoint answers it without
taking a reply from its script (real servers ignore the header)."""


def build_app(endpoint: Any) -> web.Application:
    """`endpoint`: `model`, `dialects`, `requests` (a list the app appends each request to),
    `served`, `api_key()` and `reply_for(headers, chat) -> ScriptedReply | None` (None: nothing
    left to say, answered 400 with `exhausted_message()`)."""
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": endpoint.model, "object": "model", "created": 0, "owned_by": "orchard-scripted"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        return await _serve(request, "chat")

    async def responses(request: web.Request) -> web.StreamResponse:
        if "responses" not in endpoint.dialects:
            return _error(404, "this endpoint speaks chat completions only")
        return await _serve(request, "responses")

    async def _serve(request: web.Request, dialect: str) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON")
        expected = endpoint.api_key()
        auth_ok = expected is None or request.headers.get("Authorization") == f"Bearer {expected}"
        if request.headers.get(PREFLIGHT_HEADER):  # orchard's pre-flight ping: answered, never a scripted turn
            if not auth_ok:
                return _error(401, "invalid API key", "authentication_error")
            return web.json_response({
                "id": "chatcmpl-preflight", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model") or endpoint.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        log = {"path": request.path, "body": body, "auth_ok": auth_ok, "done_at": None}
        endpoint.requests.append(log)
        if not auth_ok:
            return _error(401, "invalid API key", "authentication_error")
        try:
            chat_body = responses_to_chat(body) if dialect == "responses" else body
        except Exception as exc:  # noqa: BLE001 - a request the translator cannot read
            return _error(400, f"cannot read the request: {exc}")
        reply = endpoint.reply_for(request.headers, chat_body)
        if reply is None:
            return _error(400, endpoint.exhausted_message())
        if reply.hang:
            await asyncio.sleep(3600)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.status != 200:
            return _error(reply.status, reply.content or f"scripted error {reply.status}", "server_error")
        turn = Turn(reply, chat_body, body.get("model") or endpoint.model)
        if not body.get("stream"):
            completion = turn.completion()
            log["done_at"] = time.monotonic()
            if dialect == "responses":
                return web.json_response(chat_completion_to_response(completion, body))
            return web.json_response(completion)
        resp = await _stream(request, dialect, body, turn)
        log["done_at"] = time.monotonic()
        return resp

    async def _stream(request: web.Request, dialect: str, body: dict[str, Any], turn: Turn) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        translator = ResponsesStream(body) if dialect == "responses" else None
        blocks: list[list[bytes]] = [translator.start()] if translator else []
        for chunk in turn.chunks():
            blocks.append(translator.feed(chunk) if translator else [encode_event(chunk)])
        blocks.append(translator.finish() if translator else [DONE])
        try:
            for n, block in enumerate(blocks):
                if turn.reply.cut_after_chunks is not None and n >= turn.reply.cut_after_chunks:
                    assert request.transport is not None
                    request.transport.abort()  # the client sees a stream cut mid-way
                    return resp
                if block:
                    await resp.write(b"".join(block))
                if turn.reply.chunk_delay_s:
                    await asyncio.sleep(turn.reply.chunk_delay_s)
            await resp.write_eof()
        except ConnectionResetError:  # the client went away mid-stream
            pass
        return resp

    app = web.Application(client_max_size=64 * 1024 * 1024)
    for prefix in ("/v1", ""):
        app.router.add_get(f"{prefix}/models", models)
        app.router.add_post(f"{prefix}/chat/completions", chat)
        app.router.add_post(f"{prefix}/responses", responses)
    return app
