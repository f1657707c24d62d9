"""An OpenAI-compatible server for a local model on the CPU (what `orchard serve` runs).

Routes (each also without the /v1 prefix):
- POST /v1/chat/completions  streamed (SSE, ends with `data: [DONE]`) or not; tool calls parsed
  from orchard's tool-call format (`orchard_cli.models.toolcall`); `logprobs`/`top_logprobs` and
  vLLM's `return_token_ids` when asked.
- POST /v1/responses         the Responses API (what the Codex CLI speaks), translated to and from
  chat by `orchard_cli.proxy.translate`: every output item gets `response.output_item.done`
  before `response.completed`.
- GET  /v1/models, GET /health.

One generation runs at a time (the CPU is the bottleneck); other requests wait their turn. A
client that goes away mid-stream stops its generation. Requests without `temperature` decode
greedily (`default_temperature`), without `max_tokens` stop after 512 tokens. On GPU machines vLLM
or SGLang serve the same checkpoint far faster, and every orchard command takes their URL as is.

    endpoint = LocalEndpoint("smollm2")          # registry names: `smollm2`, `local` (checkpoint=DIR)
    info = endpoint.start()                      # info.base_url == "http://127.0.0.1:<port>/v1"
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator

from orchard_cli.errors import OrchardError
from orchard_cli.models.base import EndpointInfo, read_key
from orchard_cli.models.serving import LoopbackEndpoint

if TYPE_CHECKING:
    from aiohttp import web

    from orchard_cli.models.local_model import LocalModel

_END = object()


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> Any:
    from aiohttp import web

    return web.json_response({"error": {"message": message, "type": kind, "code": code or status}}, status=status)


def _error_for(exc: Exception) -> Any:
    from orchard_cli.models.local_chat import ContextLengthError

    if isinstance(exc, OrchardError):
        code = "context_length_exceeded" if isinstance(exc, ContextLengthError) else None
        return _error(exc.status_code, exc.message, code=code)
    return _error(500, f"{type(exc).__name__}: {exc}", "server_error")


async def _iterate(make: Callable[[threading.Event], Iterator[Any]]) -> Any:
    """Run a blocking iterator in a worker thread; yield its items on the event loop. Closing the
    async generator (the client went away) sets the cancel event the iterator watches."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    cancel = threading.Event()

    def work() -> None:
        try:
            for item in make(cancel):
                loop.call_soon_threadsafe(queue.put_nowait, item)
        except BaseException as exc:  # handed to the event loop
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        loop.call_soon_threadsafe(queue.put_nowait, _END)

    worker = loop.run_in_executor(None, work)
    try:
        while True:
            item = await queue.get()
            if item is _END:
                break
            yield item
    finally:
        cancel.set()
        await asyncio.shield(worker)


def build_app(model: LocalModel, *, key_env: str | None = None, default_temperature: float = 0.0,
              default_max_tokens: int | None = None) -> web.Application:
    from aiohttp import web

    from orchard_cli.models.local_chat import DEFAULT_MAX_TOKENS, ChatJob
    from orchard_cli.proxy.sse import DONE, encode_event
    from orchard_cli.proxy.translate import ResponsesStream, chat_completion_to_response, responses_to_chat

    def job_for(chat: dict[str, Any]) -> ChatJob:
        return ChatJob(model, chat, default_temperature=default_temperature,
                       default_max_tokens=default_max_tokens or DEFAULT_MAX_TOKENS)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "model": model.name})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": model.name, "object": "model", "created": 0, "owned_by": "orchard",
             "root": str(model.source), "max_model_len": model.context}]})

    async def body_of(request: web.Request) -> dict[str, Any] | web.Response:
        expected = read_key(key_env)
        if expected is not None and request.headers.get("Authorization") != f"Bearer {expected}":
            return _error(401, "invalid API key", "authentication_error")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON")
        return body if isinstance(body, dict) else _error(400, "request body must be a JSON object")

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await body_of(request)
        if not isinstance(body, dict):
            return body
        try:
            job = await asyncio.to_thread(job_for, body)
        except Exception as exc:
            return _error_for(exc)
        if not body.get("stream"):
            try:
                return web.json_response(await asyncio.to_thread(job.run))
            except Exception as exc:
                return _error_for(exc)
        return await stream(request, job, None)

    async def responses(request: web.Request) -> web.StreamResponse:
        body = await body_of(request)
        if not isinstance(body, dict):
            return body
        try:
            chat_body = responses_to_chat(body)
            job = await asyncio.to_thread(job_for, chat_body)
        except Exception as exc:
            return _error_for(exc)
        if not body.get("stream"):
            try:
                completion = await asyncio.to_thread(job.run)
            except Exception as exc:
                return _error_for(exc)
            return web.json_response(chat_completion_to_response(completion, body))
        return await stream(request, job, ResponsesStream(body))

    async def stream(request: web.Request, job: ChatJob, translator: ResponsesStream | None) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        chunks = _iterate(job.chunks)
        try:
            if translator is not None:
                await resp.write(b"".join(translator.start()))
            async for chunk in chunks:
                if isinstance(chunk, BaseException):
                    message = chunk.message if isinstance(chunk, OrchardError) else f"{type(chunk).__name__}: {chunk}"
                    await resp.write(translator.fail(message) if translator else encode_event(
                        {"error": {"message": message, "type": "server_error", "code": 500}}))
                    break
                await resp.write(b"".join(translator.feed(chunk)) if translator else encode_event(chunk))
            else:
                await resp.write(b"".join(translator.finish()) if translator else DONE)
            await resp.write_eof()
        except ConnectionResetError:  # the client went away: its generation stops (below)
            pass
        finally:
            await chunks.aclose()
        return resp

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/health", health)
    for prefix in ("/v1", ""):
        app.router.add_get(f"{prefix}/models", models)
        app.router.add_post(f"{prefix}/chat/completions", chat)
        app.router.add_post(f"{prefix}/responses", responses)
    return app


class LocalEndpoint(LoopbackEndpoint):
    """A local checkpoint (or `smollm2`) served on loopback; registered as `local` and `smollm2`.

    `model=` serves a LocalModel the caller already holds (an RL loop that syncs its weights with
    `LocalModel.load_weights_from`); `checkpoint` then only names the endpoint."""

    server_name = "orchard-serve"
    grace_s = 1.0

    def __init__(self, checkpoint: str = "smollm2", *, host: str = "127.0.0.1", port: int = 0,
                 threads: int | None = 1, key_env: str | None = None, default_temperature: float = 0.0,
                 default_max_tokens: int | None = None, cache: bool = True, prefix_cache: bool = True,
                 model: LocalModel | None = None, device: str | None = None) -> None:
        super().__init__(host=host, port=port, key_env=key_env)
        self.checkpoint = checkpoint
        self._threads, self._cache = threads, cache
        self._temperature, self._max_tokens = default_temperature, default_max_tokens
        self._prefix_cache = prefix_cache
        self._device = device
        self.model: LocalModel | None = None
        if model is not None:
            self._use(model)

    def _use(self, model: LocalModel) -> LocalModel:
        self.model = model
        if not self._prefix_cache:
            model.prefix_cache = False
            model.forget()
        return model

    def load(self) -> LocalModel:
        """Load the model (once per process; later calls return the same one)."""
        from orchard_cli.models.local_model import load_model

        if self.model is None:
            self._use(load_model(self.checkpoint, threads=self._threads, cache=self._cache, device=self._device))
        assert self.model is not None
        return self.model

    def app(self) -> Any:
        return build_app(self.load(), key_env=self.key_env, default_temperature=self._temperature,
                         default_max_tokens=self._max_tokens)

    def info(self, root: str) -> EndpointInfo:
        return EndpointInfo(name="smollm2" if self.checkpoint == "smollm2" else "local", base_url=f"{root}/v1",
                            model=self.load().name, dialects=["chat", "responses"], key_env=self.key_env)

    def start(self) -> EndpointInfo:
        self.load()  # outside the server thread: loading takes a while and may fail clearly
        return super().start()


def smollm2(**options: Any) -> LocalEndpoint:
    """The embedded default model, SmolLM2-135M-Instruct (registry name `smollm2`)."""
    options.pop("checkpoint", None)
    return LocalEndpoint("smollm2", **options)
