"""An OpenAI-compatible server for a local model on the CPU (what `orchard serve` runs).

Routes (each also without the /v1 prefix):
- POST /v1/chat/completions  streamed (SSE, ends with `data: [DONE]`) or not; tool calls parsed
  from orchard's tool-call format (`orchard_cli.models.toolcall`); `logprobs`/`top_logprobs` and
  vLLM's `return_token_ids` when asked.
- POST /v1/responses         the Responses API (what the Codex CLI speaks), translated to and from
  chat by `orchard_cli.proxy.translate`: every output item gets `response.output_item.done`
  before `response.completed`.
- GET  /v1/models, GET /health.
- POST /v1/load_lora_adapter, /v1/unload_lora_adapter (vLLM's runtime LoRA API; `enable_lora`) and
  POST /update_weights_from_disk (SGLang's; `enable_weight_updates`): weights pushed by an RL
  trainer (`models.adapters`); every answer then names its `weight_version`.

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
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterator

from orchard_cli.errors import OrchardError, OverloadedError
from orchard_cli.models.base import EndpointInfo, read_key
from orchard_cli.models.serving import LoopbackEndpoint

if TYPE_CHECKING:
    from aiohttp import web

    from orchard_cli.models.local_chat import ChatJob
    from orchard_cli.models.local_model import LocalModel

_END = object()
DEFAULT_MAX_BATCH = 8  # not yet tuned by measurement: bench/serve_batch_bench.py --max-batch N compares


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> Any:
    from aiohttp import web

    return web.json_response({"error": {"message": message, "type": kind, "code": code or status}}, status=status)


def _error_for(exc: Exception) -> Any:
    from orchard_cli.models.local_chat import ContextLengthError

    if isinstance(exc, OverloadedError):  # the batch's queue is full: come back later
        response = _error(exc.status_code, exc.message, "rate_limit_exceeded" if exc.status_code == 429
                          else "server_error")
        response.headers["Retry-After"] = f"{max(1, round(exc.retry_after))}"
        return response
    if isinstance(exc, OrchardError):
        code = "context_length_exceeded" if isinstance(exc, ContextLengthError) else None
        return _error(exc.status_code, exc.message, code=code)
    return _error(500, f"{type(exc).__name__}: {exc}", "server_error")


async def _whole(request: web.Request, job: ChatJob, cancel: threading.Event, executor: Executor) -> Any:
    """`job.run` in a worker thread; a client that hangs up before the answer frees its place."""
    loop = asyncio.get_running_loop()
    worker = loop.run_in_executor(executor, job.run, cancel)
    try:
        while not worker.done():
            await asyncio.wait([worker], timeout=0.25)
            transport = request.transport
            if transport is None or transport.is_closing():
                cancel.set()
    finally:
        if not worker.done():  # the handler was cancelled (the server stops): the generation stops too
            cancel.set()
    return worker.result()


async def _iterate(make: Callable[[threading.Event], Iterator[Any]], cancel: threading.Event,
                   executor: Executor | None = None) -> Any:
    """Run a blocking iterator in a worker thread; yield its items on the event loop. Closing the
    async generator (the client went away) sets the cancel event the iterator watches."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def work() -> None:
        try:
            for item in make(cancel):
                loop.call_soon_threadsafe(queue.put_nowait, item)
        except BaseException as exc:  # handed to the event loop
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        loop.call_soon_threadsafe(queue.put_nowait, _END)

    worker = loop.run_in_executor(executor, work)
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
              default_max_tokens: int | None = None, enable_lora: bool = False, max_loras: int = 2,
              enable_weight_updates: bool = False) -> web.Application:
    from aiohttp import web

    from orchard_cli.models.adapters import Weights
    from orchard_cli.models.local_chat import DEFAULT_MAX_TOKENS, ChatJob
    from orchard_cli.proxy.sse import DONE, encode_event
    from orchard_cli.proxy.translate import ResponsesStream, chat_completion_to_response, responses_to_chat

    weights = Weights(model, max_loras)

    def job_for(chat: dict[str, Any]) -> ChatJob:
        return ChatJob(weights.model_for(chat.get("model")), chat, default_temperature=default_temperature,
                       default_max_tokens=default_max_tokens or DEFAULT_MAX_TOKENS)

    engine = model.engine
    # one thread per request in flight (each waits on its tokens), not the loop's default few
    workers = 32 if engine is None else max(32, engine.limits.max_batch + engine.limits.max_queue + 8)
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="orchard-serve")

    async def health(request: web.Request) -> web.Response:
        state: dict[str, Any] = {"status": "ok", "model": model.name}
        if model.engine is not None:
            state["batch"] = {**model.engine.load(), "max_batch": model.engine.limits.max_batch,
                              "steps": model.engine.steps, "peak_batch": model.engine.peak_batch}
        return web.json_response(state)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": model.name, "object": "model", "created": 0, "owned_by": "orchard",
             "root": str(model.source), "max_model_len": model.context}, *weights.listing()]})

    async def load_lora(request: web.Request) -> web.Response:
        body = await body_of(request)
        if not isinstance(body, dict):
            return body
        if not enable_lora:
            return _error(404, "runtime LoRA loading is off: start orchard serve with --enable-lora")
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not isinstance(path, str):
            return _error(400, "load_lora_adapter needs lora_name and lora_path (strings)")
        version = body.get("weight_version")
        try:
            found = await asyncio.to_thread(weights.load_lora, name, path, inplace=bool(body.get("load_inplace")),
                                            version=None if version is None else str(version))
        except Exception as exc:
            return _error_for(exc)
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully (weight_version {found}).")

    async def unload_lora(request: web.Request) -> web.Response:
        body = await body_of(request)
        if not isinstance(body, dict):
            return body
        if not enable_lora:
            return _error(404, "runtime LoRA loading is off: start orchard serve with --enable-lora")
        try:
            weights.unload_lora(str(body.get("lora_name")))
        except Exception as exc:
            return _error_for(exc)
        return web.Response(text=f"Success: LoRA adapter '{body.get('lora_name')}' removed successfully.")

    async def update_weights(request: web.Request) -> web.Response:
        body = await body_of(request)
        if not isinstance(body, dict):
            return body
        if not enable_weight_updates:
            return web.json_response({"success": False, "message": "weight updates are off: start orchard serve "
                                                                    "with --enable-weight-updates"}, status=404)
        path, version = body.get("model_path"), body.get("weight_version")
        if not isinstance(path, str):
            return web.json_response({"success": False, "message": "model_path (a string) is needed"}, status=400)
        try:
            seconds = await asyncio.to_thread(weights.update_from_disk, path,
                                              None if version is None else str(version))
        except Exception as exc:
            message = exc.message if isinstance(exc, OrchardError) else f"{type(exc).__name__}: {exc}"
            return web.json_response({"success": False, "message": message}, status=400)
        return web.json_response({"success": True, "message": f"weights of {path} loaded in {seconds:.2f} s",
                                  "weight_version": model.weight_version})

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
        return body if not isinstance(body, dict) else await answer(request, body, None)

    async def responses(request: web.Request) -> web.StreamResponse:
        body = await body_of(request)
        return body if not isinstance(body, dict) else await answer(request, body, body)

    async def answer(request: web.Request, body: dict[str, Any], original: dict[str, Any] | None) -> Any:
        """One request (chat, or Responses when `original` is its body), whole or streamed. It takes
        its place in the batch before any byte of the answer: a full queue is a plain 429."""
        cancel = threading.Event()
        try:
            chat_body = responses_to_chat(body) if original is not None else body
            job = await asyncio.get_running_loop().run_in_executor(executor, job_for, chat_body)
            job.admit(cancel)
        except Exception as exc:
            return _error_for(exc)
        if body.get("stream"):
            return await stream(request, job, cancel, ResponsesStream(original) if original is not None else None)
        try:
            completion = await _whole(request, job, cancel, executor)
        except Exception as exc:
            return _error_for(exc)
        return web.json_response(completion if original is None else chat_completion_to_response(completion, original))

    async def stream(request: web.Request, job: ChatJob, cancel: threading.Event,
                     translator: ResponsesStream | None) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        chunks = _iterate(job.chunks, cancel, executor)
        try:
            await resp.prepare(request)
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
            cancel.set()
            await chunks.aclose()
        return resp

    async def close_executor(app: web.Application) -> None:
        executor.shutdown(wait=False, cancel_futures=True)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.on_cleanup.append(close_executor)
    app.router.add_get("/health", health)
    app.router.add_post("/update_weights_from_disk", update_weights)
    for prefix in ("/v1", ""):
        app.router.add_get(f"{prefix}/models", models)
        app.router.add_post(f"{prefix}/chat/completions", chat)
        app.router.add_post(f"{prefix}/responses", responses)
        app.router.add_post(f"{prefix}/load_lora_adapter", load_lora)
        app.router.add_post(f"{prefix}/unload_lora_adapter", unload_lora)
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
                 model: LocalModel | None = None, max_batch: int = DEFAULT_MAX_BATCH,
                 max_queue: int | None = None, device: str | None = None, enable_lora: bool = False,
                 max_loras: int = 2, enable_weight_updates: bool = False) -> None:
        super().__init__(host=host, port=port, key_env=key_env)
        self._weights = {"enable_lora": enable_lora, "max_loras": max_loras,
                         "enable_weight_updates": enable_weight_updates}
        self.checkpoint = checkpoint
        self._threads, self._cache = threads, cache
        self._temperature, self._max_tokens = default_temperature, default_max_tokens
        self._prefix_cache = prefix_cache
        self._max_batch, self._max_queue = max_batch, max_queue
        self._device = device or "cpu"
        self.batching: str = "off"  # what `_use` made of `max_batch`: "on (N)", "off", or why not
        self.model: LocalModel | None = None
        if model is not None:
            self._use(model)

    def _use(self, model: LocalModel) -> LocalModel:
        """Serve `model` with this endpoint's settings. The model object is shared in the process
        (`load_model`): the last endpoint to configure it sets its batching."""
        from orchard_cli.models.batching import Limits

        self.model = model
        if not self._prefix_cache:
            model.prefix_cache = False
            model.forget()
        if self._max_batch > 1:
            limits = Limits(max_batch=self._max_batch)
            if self._max_queue is not None:
                limits.max_queue = self._max_queue
            why = model.enable_batching(limits)
            self.batching = f"on (up to {self._max_batch} requests a step)" if why is None else f"off: {why}"
        else:
            model.disable_batching()
            self.batching = "off (--max-batch 1: one request at a time)"
        return model

    def load(self) -> LocalModel:
        """Load the model (once per process; later calls return the same one)."""
        from orchard_cli.models.local_model import load_model

        if self.model is None:
            self._use(load_model(self.checkpoint, threads=self._threads, cache=self._cache,
                                 device=self._device))
        assert self.model is not None
        return self.model

    def app(self) -> Any:
        return build_app(self.load(), key_env=self.key_env, default_temperature=self._temperature,
                         default_max_tokens=self._max_tokens, **self._weights)

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
