"""The recording proxy's aiohttp app: route a call to its episode, forward it, record it.

Hot path: read the body, swap the episode token for the upstream key, forward the bytes, relay the
answer as it arrives (SSE is written chunk by chunk, never buffered). A call in the harness's own
dialect is not parsed on the way through (unless `model`/`extra_body` rewrite it); parsing,
assembling streams and building the record happen after the harness has its answer
(`capture.py`), and the file is written by a background thread (`records.py`). Only a
translated call (Responses over a chat upstream) is parsed as it streams, since each chat chunk
becomes Responses events.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import secrets
import time
from typing import Any

import aiohttp
from aiohttp import web

from orchard_cli.proxy.capture import Call, finish_call
from orchard_cli.proxy.config import ProxyConfig
from orchard_cli.proxy.routes import Episode
from orchard_cli.proxy.calls import REDACTED, JsonlWriter
from orchard_cli.proxy.sse import ChatAssembler, SSEDecoder
from orchard_cli.proxy.translate import (
    ResponsesStream,
    TranslationError,
    chat_completion_to_response,
    completion_as_chunk,
    responses_to_chat,
)

log = logging.getLogger("orchard.proxy")

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class UpstreamFailure(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def error_body(message: str, kind: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


async def _send(request: web.Request, status: int, body: bytes,
                content_type: str = "application/json") -> web.Response:
    resp = web.Response(body=body, status=status, headers={"Content-Type": content_type})
    await resp.prepare(request)
    await resp.write_eof()
    return resp


async def _read_capped(request: web.Request, limit: int) -> bytes | None:
    """The request body, or None when it is over `limit` bytes: refused by its Content-Length
    before a byte is read, else read chunk by chunk and dropped once past the limit."""
    if request.content_length is not None and request.content_length > limit:
        return None
    parts, size = [], 0
    while True:
        chunk = await request.content.readany()
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)


def _abort(request: web.Request) -> None:
    """Drop the harness's connection so that a cut upstream stream reads as cut, not complete."""
    if request.transport is not None:
        request.transport.abort()


class ProxyServer:
    def __init__(self, config: ProxyConfig, api_key: str | None) -> None:
        self.config = config
        self.root_url = ""
        self.episodes: dict[str, Episode] = {}
        self.session: aiohttp.ClientSession | None = None
        self.writer = JsonlWriter(config.out, [api_key or ""]) if config.out else None
        self._secret = api_key.encode() if api_key else None
        base = config.upstream_url.rstrip("/")
        self._urls = {"chat": f"{base}/chat/completions", "responses": f"{base}/responses",
                      "models": f"{base}/models"}
        self._headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._rewrite = bool(config.model or config.extra_body)
        self._run_id = secrets.token_hex(4)
        self._calls = itertools.count()

    def next_call_id(self) -> str:
        """Unique across runs (a random run id) and ordered within one (a counter)."""
        return f"call-{self._run_id}-{next(self._calls):06d}"

    # -- lifecycle -------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_request_bytes)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        for prefix in ("/e/{token}/v1", "/e/{token}", "/v1"):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_post(f"{prefix}/responses", self._responses)
            app.router.add_get(f"{prefix}/models", self._models)
        app.router.add_get("/e/{token}/tools", self._tools)
        app.router.add_post("/e/{token}/tools/{name}", self._tool_call)
        return app

    async def _startup(self, app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=None, connect=self.config.connect_timeout_s,
                                        sock_read=self.config.read_timeout_s)
        connector = aiohttp.TCPConnector(limit=512, ttl_dns_cache=300)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout,
                                             auto_decompress=False, skip_auto_headers=("User-Agent",))

    async def _cleanup(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()
        if self.writer is not None:
            self.writer.close()

    def open_episode(self, episode_id: str, *, token: str | None = None, max_calls: int | None = None,
                     max_tokens: int | None = None, tools: Any = None) -> Episode:
        root = (self.config.advertise_url or self.root_url).rstrip("/")
        episode = Episode(episode_id, root, token=token,
                          max_calls=max_calls if max_calls is not None else self.config.max_calls,
                          max_tokens=max_tokens if max_tokens is not None else self.config.max_tokens,
                          keep=self.config.keep_records, tools=tools, record_limit=self.config.max_record_bytes)
        episode._registry = self.episodes
        self.episodes[episode.token] = episode
        return episode

    def _episode(self, request: web.Request) -> Episode | None:
        token = request.match_info.get("token")
        if token is None:
            auth = request.headers.get("Authorization", "")
            token = auth[7:] if auth.startswith("Bearer ") else None
            episode = self.episodes.get(token) if token else None
            if episode is None and self.config.auto_episodes:
                token = "default"
            else:
                return episode
        episode = self.episodes.get(token)
        if episode is None and self.config.auto_episodes and _NAME.match(token):
            episode = self.open_episode(token, token=token)
        return episode if episode is not None and not episode.closed else None

    # -- handlers --------------------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "chat")

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "responses")

    async def _models(self, request: web.Request) -> web.StreamResponse:
        if self._episode(request) is None:
            return await _send(request, 401, error_body("unknown or closed episode token",
                                                        "authentication_error", "invalid_api_key"))
        assert self.session is not None
        try:
            async with self.session.get(self._urls["models"], headers=self._headers) as upstream:
                data = await upstream.read()
                return await _send(request, upstream.status, data,
                                   upstream.headers.get("Content-Type", "application/json"))
        except UPSTREAM_ERRORS as exc:
            return await _send(request, 502, error_body(f"upstream unreachable: {exc!r}",
                                                        "upstream_error", "orchard_upstream_unreachable"))

    # -- the tool gateway (orchard_cli.tools): the episode's task tools, each call a dispatch ------
    def _tool_episode(self, request: web.Request) -> Episode | None:
        episode = self._episode(request)
        auth = request.headers.get("Authorization", "")
        if episode is None or episode.tools is None or auth != f"Bearer {episode.token}":
            return None
        return episode

    async def _tools(self, request: web.Request) -> web.StreamResponse:
        episode = self._tool_episode(request)
        if episode is None:
            return await _send(request, 401, error_body("unknown or closed episode token, or an episode "
                                                        "without tools", "authentication_error", "invalid_api_key"))
        return await _send(request, 200, json.dumps({"tools": episode.tools.public()}).encode())

    async def _tool_call(self, request: web.Request) -> web.StreamResponse:
        episode = self._tool_episode(request)
        if episode is None:
            return await _send(request, 401, error_body("unknown or closed episode token, or an episode "
                                                        "without tools", "authentication_error", "invalid_api_key"))
        name = request.match_info["name"]
        if name not in episode.tools.specs:
            episode.tools.call(name, {})  # recorded: the agent asked for a tool that is not there
            return await _send(request, 404, error_body(f"no tool named {name!r}", "invalid_request_error",
                                                        "orchard_unknown_tool"))
        from orchard_cli.tools.spec import ARGUMENTS_LIMIT

        body = await _read_capped(request, ARGUMENTS_LIMIT)  # never more than the limit in memory
        if body is None:
            reply = episode.tools.refuse_oversized(name, request.content_length or ARGUMENTS_LIMIT + 1)
            return await _send(request, 200, reply.model_dump_json().encode())
        try:
            arguments = json.loads(body or b"{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            reply = episode.tools.call(name, arguments)  # recorded as a 400
            return await _send(request, 400, reply.model_dump_json().encode())
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(None, episode.tools.call, name, arguments)
        return await _send(request, 200, reply.model_dump_json().encode())

    async def _handle(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        t0, started_at = time.perf_counter(), time.time()
        episode = self._episode(request)
        if episode is None:
            return await _send(request, 401, error_body("unknown or closed episode token",
                                                        "authentication_error", "invalid_api_key"))
        raw = await _read_capped(request, self.config.max_request_bytes)
        seq, capped = episode.admit()
        call = Call(episode, endpoint, raw or b"", seq, t0, started_at)
        try:
            if raw is None:
                message = (f"orchard proxy: the request is over {self.config.max_request_bytes} bytes, the most "
                           "a model call may send here (orchard proxy --max-request-mb; ProxyConfig.max_request_bytes)")
                call.fail("client", message, 413)
                return await _send(request, 413, error_body(message, "invalid_request_error",
                                                            "orchard_request_too_large"))
            if capped:
                call.fail("capped", f"episode {episode.id} capped: {capped}", 400)
                return await _send(request, 400, error_body(
                    f"orchard: episode capped ({capped}); no further model calls are allowed",
                    "invalid_request_error", "orchard_episode_capped"))
            if endpoint in self.config.upstream_dialects:
                return await self._forward(request, call)
            if endpoint == "responses":
                return await self._translate(request, call)
            call.fail("translation", "chat completions over a Responses-only upstream are not supported", 501)
            return await _send(request, 501, error_body(
                "orchard proxy: this upstream speaks only the Responses API; chat completions "
                "over it are not supported", "invalid_request_error", "orchard_not_supported"))
        except UpstreamFailure as exc:
            call.fail("infra", exc.message, exc.status)
            return await _send(request, exc.status, error_body(exc.message, "upstream_error",
                                                               "orchard_upstream_failure"))
        except ConnectionResetError as exc:  # the harness hung up
            call.fail("client", f"client disconnected: {exc}", None)
            return web.Response(status=499)
        finally:
            call.ended = time.perf_counter()
            finish_call(call, self)

    # -- upstream --------------------------------------------------------------------------------
    def _body(self, raw: bytes, call: Call) -> bytes:
        if not self._rewrite:
            return raw
        body = call.parsed_body()
        if not isinstance(body, dict):
            return raw
        upstream = {**body, **self.config.extra_body}
        if self.config.model:
            upstream["model"] = self.config.model
        call.upstream_request = upstream
        return json.dumps(upstream).encode()

    async def _post(self, url: str, body: bytes, call: Call) -> aiohttp.ClientResponse:
        assert self.session is not None
        cfg = self.config
        while True:
            call.attempts += 1
            retry = call.attempts <= cfg.max_retries
            delay = min(cfg.retry_backoff_s * 2 ** (call.attempts - 1), 8.0)
            try:
                headers = self._headers
                if cfg.episode_header:
                    headers = {**headers, "X-Orchard-Episode": call.episode.id}
                upstream = await self.session.post(url, data=body, headers=headers)
            except asyncio.TimeoutError:
                raise UpstreamFailure(504, f"upstream timed out: no answer within "
                                           f"{cfg.read_timeout_s:g} s ({url})") from None
            except aiohttp.ClientError as exc:
                if retry:
                    await asyncio.sleep(delay)
                    continue
                raise UpstreamFailure(502, f"upstream unreachable after {call.attempts} attempts: "
                                           f"{type(exc).__name__}: {exc}") from None
            if upstream.status in RETRY_STATUS and retry:
                after = upstream.headers.get("Retry-After", "")
                if after.replace(".", "", 1).isdigit():
                    delay = min(float(after), 30.0)
                try:
                    await upstream.read()
                except UPSTREAM_ERRORS:
                    pass
                upstream.release()
                await asyncio.sleep(delay)
                continue
            return upstream

    async def _relay_error(self, request: web.Request, call: Call,
                           upstream: aiohttp.ClientResponse) -> web.Response:
        try:
            data = await upstream.read()
        except UPSTREAM_ERRORS as exc:
            raise UpstreamFailure(502, f"upstream answer cut: {type(exc).__name__}: {exc}") from None
        if self._secret and self._secret in data:  # an upstream that echoes the key: never to the agent
            data = data.replace(self._secret, REDACTED.encode())
        call.parts.append(data)
        call.fail("upstream", f"upstream answered {upstream.status}", upstream.status)
        return await _send(request, upstream.status, data,
                           upstream.headers.get("Content-Type", "application/json"))

    async def _forward(self, request: web.Request, call: Call) -> web.StreamResponse:
        call.upstream_endpoint = call.endpoint
        upstream = await self._post(self._urls[call.endpoint], self._body(call.raw, call), call)
        try:
            call.first_byte = time.perf_counter()
            call.status = upstream.status
            ctype = upstream.headers.get("Content-Type", "application/json")
            if upstream.status != 200:
                return await self._relay_error(request, call, upstream)
            if not ctype.startswith("text/event-stream"):
                try:
                    data = await upstream.read()
                except UPSTREAM_ERRORS as exc:
                    raise UpstreamFailure(502, f"upstream answer cut: {type(exc).__name__}: {exc}") from None
                call.parts.append(data)
                return await _send(request, 200, data, ctype)
            call.stream = True
            resp = web.StreamResponse(headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
            await resp.prepare(request)
            content = upstream.content
            while True:
                try:
                    data = await content.readany()
                except UPSTREAM_ERRORS as exc:
                    call.fail("infra", f"upstream stream cut mid-way: {type(exc).__name__}: {exc}", 502)
                    _abort(request)
                    return resp
                if not data:
                    break
                if not call.parts:
                    call.first_byte = time.perf_counter()
                call.parts.append(data)
                await resp.write(data)
            await resp.write_eof()
            return resp
        finally:
            upstream.release()

    async def _translate(self, request: web.Request, call: Call) -> web.StreamResponse:
        body = call.parsed_body()
        if not isinstance(body, dict):
            call.fail("client", "request body is not a JSON object", 400)
            return await _send(request, 400, error_body("request body is not a JSON object",
                                                        "invalid_request_error", "invalid_json"))
        try:
            chat = responses_to_chat(body)
        except TranslationError as exc:
            call.fail("translation", exc.message, 400)
            return await _send(request, 400, error_body(exc.message, "invalid_request_error",
                                                        "orchard_not_supported"))
        chat.update(self.config.extra_body)
        if self.config.model:
            chat["model"] = self.config.model
        call.upstream_endpoint, call.upstream_request = "chat", chat
        upstream = await self._post(self._urls["chat"], json.dumps(chat).encode(), call)
        try:
            call.first_byte = time.perf_counter()
            call.status = upstream.status
            if upstream.status != 200:
                return await self._relay_error(request, call, upstream)
            if not upstream.headers.get("Content-Type", "").startswith("text/event-stream"):
                return await self._translate_whole(request, call, upstream, body)
            call.stream = True
            return await self._translate_stream(request, call, upstream, ResponsesStream(body))
        finally:
            upstream.release()

    async def _translate_whole(self, request: web.Request, call: Call, upstream: aiohttp.ClientResponse,
                               body: dict[str, Any]) -> web.StreamResponse:
        try:
            data = await upstream.read()
            completion = json.loads(data)
        except (*UPSTREAM_ERRORS, ValueError) as exc:
            raise UpstreamFailure(502, f"upstream answer unusable: {type(exc).__name__}: {exc}") from None
        call.parts.append(data)
        call.upstream_response = completion
        if not body.get("stream"):
            call.response = chat_completion_to_response(completion, body)
            return await _send(request, 200, json.dumps(call.response).encode())
        stream = ResponsesStream(body)  # a streamed request answered whole: replay it as events
        events = stream.start() + stream.feed(completion_as_chunk(completion)) + stream.finish()
        call.response = stream.response
        return await _send(request, 200, b"".join(events), "text/event-stream")

    async def _translate_stream(self, request: web.Request, call: Call, upstream: aiohttp.ClientResponse,
                                stream: ResponsesStream) -> web.StreamResponse:
        decoder, assembler = SSEDecoder(), ChatAssembler()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(b"".join(stream.start()))
        while True:
            try:
                data = await upstream.content.readany()
            except UPSTREAM_ERRORS as exc:
                call.fail("infra", f"upstream stream cut mid-way: {type(exc).__name__}: {exc}", 502)
                call.upstream_response = assembler.result()
                _abort(request)
                return resp
            events = decoder.feed(data) if data else decoder.tail()
            if not call.parts:
                call.first_byte = time.perf_counter()
            call.parts.append(data)
            out: list[bytes] = []
            for _, payload in events:
                if payload == "[DONE]":
                    continue
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    continue
                if isinstance(chunk, dict) and chunk.get("error"):
                    call.fail("upstream", f"upstream error mid-stream: {chunk['error']}", 200)
                    out.append(stream.fail(chunk["error"]))
                    await resp.write(b"".join(out))
                    await resp.write_eof()
                    call.response = stream.response
                    return resp
                assembler.feed(chunk)
                out += stream.feed(chunk)
            if out:
                await resp.write(b"".join(out))
            if not data:
                break
        await resp.write(b"".join(stream.finish()))
        await resp.write_eof()
        call.response, call.upstream_response = stream.response, assembler.result()
        return resp

