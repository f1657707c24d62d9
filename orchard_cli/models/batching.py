"""Continuous batching: one model, many requests, one forward pass per token boundary.

    engine = Engine(model, runner, Limits(max_batch=8))
    request = engine.submit(prompt_ids, max_tokens=64)     # OverloadedError (429) past the caps
    for step in engine.stream(request): ...                # Steps, as `LocalModel.steps` yields them
    engine.between_steps(fn)                               # fn() on the engine's thread, batch drained

A daemon thread owns the model's batch. Each pass it drops the requests that are finished or whose
consumer left (`cancel`, or the stream closed), admits waiting requests while there is room (at
most `max_batch` running, their prompts and token caps within `max_kv_tokens`), and runs one
packed forward pass (`models.packed`) over every running request's next token plus the prompt
chunks of the requests joining (at most `step_tokens` prompt tokens a pass, so a long prompt does
not stall the others for its whole length). A request therefore joins at the next token boundary:
it never waits for the batch to drain. Each request keeps its own KV cache (positions, no padding),
sampling parameters and seeded generator, stop tokens and cap; the log-probabilities are of the
raw distribution, as in `LocalModel.steps`, whose greedy tokens these match (tests/models/test_batching.py).

Back-pressure: past `max_queue` waiting requests, `submit` raises `Busy` (HTTP 429, Retry-After).

The prefix cache (`PrefixCache`) holds finished requests' KV caches, least recently used evicted
past `cache_tokens`: a conversation's next turn (an agent's next call) only processes its new
tokens, whichever other conversations ran in between.

`between_steps(fn, drain=True)` is the weight swap's entry point: admission stops, the running
requests finish on the weights they started with, `fn` runs with the batch empty, the prefix cache
(computed by the old weights) is dropped, admission resumes. No request ever mixes two versions
of the weights. `drain=False` runs `fn` at the next token boundary instead, the running requests
paused around it (for work that leaves the weights as they are).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

from orchard_cli.errors import InfraError, OverloadedError
from orchard_cli.models.prefix_cache import PrefixCache

_DONE = object()


class Busy(OverloadedError):
    """The server's queue is full: try again after `retry_after` seconds (HTTP 429)."""

    status_code = 429


@dataclass
class Limits:
    """How much one engine takes on."""

    max_batch: int = 8
    """Requests decoded together; more wait in the queue."""
    max_queue: int = 256
    """Requests waiting while the batch is full; past it `submit` answers 429."""
    max_kv_tokens: int = 65536
    """Prompt + token cap of the running requests, summed (their KV caches); a request that
    needs more than this alone still runs, alone."""
    step_tokens: int = 128
    """Prompt tokens processed a pass, across joining requests (chunked prefill)."""
    cache_tokens: int = 32768
    """Tokens kept in the prefix cache, all conversations together."""


@dataclass(eq=False)  # compared by identity (queues, the batch)
class Request:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_logprobs: int = 0
    generator: Any = None
    cancel: threading.Event = field(default_factory=threading.Event)
    info: dict[str, Any] = field(default_factory=dict)
    out: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    slot: Any = None
    pending: list[int] = field(default_factory=list)  # tokens to feed: the prompt's rest, then the last sample
    decoding: bool = False  # the whole prompt has been fed
    produced: int = 0
    ended: bool = False  # generation is over (a stop token, the cap); the engine drops it next
    done: bool = False  # dropped: its stream has ended
    submitted: float = field(default_factory=time.monotonic)

    @property
    def reserve(self) -> int:
        return len(self.prompt_ids) + self.max_tokens


class Engine:
    """The batch of one `LocalModel` (see the module's docstring)."""

    def __init__(self, model: Any, runner: Any, limits: Limits | None = None) -> None:
        self.model, self.runner = model, runner
        self.limits = limits or Limits()
        self.cache = PrefixCache(self.limits.cache_tokens)
        self._cv = threading.Condition()
        self._waiting: list[Request] = []
        self._running: list[Request] = []
        self._tasks: list[tuple[Callable[[], Any], bool, Any]] = []
        self._thread: threading.Thread | None = None
        self.steps = 0  # forward passes run
        self.peak_batch = 0
        self.closed = False

    # -- the consumer side ------------------------------------------------------------------
    def submit(self, prompt_ids: list[int], *, max_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
               seed: int | None = None, top_logprobs: int = 0, cancel: threading.Event | None = None,
               info: dict[str, Any] | None = None) -> Request:
        """Queue a request; `Busy` when the queue is full."""
        import torch

        if not prompt_ids or max_tokens < 1:
            raise ValueError("a request needs at least one prompt token and a token cap of at least 1")
        generator = torch.Generator().manual_seed(int(seed)) if temperature > 0 and seed is not None else None
        request = Request(list(prompt_ids), max_tokens, temperature, top_p, top_logprobs, generator,
                          cancel or threading.Event(), info if info is not None else {})
        with self._cv:
            if self.closed:
                raise OverloadedError("this model's batch is closed (the server is changing its settings)")
            if len(self._waiting) >= self.limits.max_queue + max(0, self.limits.max_batch - len(self._running)):
                raise Busy(f"{len(self._waiting)} requests are waiting for the model (--max-queue "
                           f"{self.limits.max_queue}); try again shortly", retry_after=self._retry_after())
            self._waiting.append(request)
            self._start()
            self._cv.notify_all()
        return request

    def stream(self, request: Request) -> Generator[Any, None, None]:
        """The request's Steps as they come; closing it early frees its place in the batch."""
        try:
            while True:
                item = request.out.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not request.done:
                request.cancel.set()
                with self._cv:
                    if request in self._waiting:  # never admitted: its place in the queue is free at once
                        self._waiting.remove(request)
                        request.done = True
                    self._cv.notify_all()

    def generate(self, prompt_ids: list[int], **options: Any) -> Generator[Any, None, None]:
        """`submit` then `stream`: what `LocalModel.steps` gives, from the batch."""
        options.pop("inputs", None)
        return self.stream(self.submit(prompt_ids, **options))

    def between_steps(self, fn: Callable[[], Any], *, drain: bool = True, timeout: float | None = None) -> Any:
        """Run `fn` on the engine's thread at a token boundary and return what it returned. With
        `drain` the running requests finish first (none joins meanwhile) and the prefix cache is
        dropped after `fn`: the weight swap. Without, `fn` runs at the next boundary."""
        if threading.current_thread() is self._thread:  # from a task already at the boundary
            return fn()
        done: queue.SimpleQueue = queue.SimpleQueue()
        with self._cv:
            self._tasks.append((fn, drain, done))
            self._start()
            self._cv.notify_all()
        try:
            ok, value = done.get(timeout=timeout)
        except queue.Empty:
            raise InfraError(f"the model's batch did not reach a token boundary within {timeout:g} s") from None
        if not ok:
            raise value
        return value

    def together(self) -> Any:
        """`with engine.together(): submit(...); submit(...)`: the requests join at one boundary."""
        return self._cv

    def close(self) -> None:
        """Take no more requests; the thread ends once the queued and running ones have finished."""
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    def wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def forget(self) -> None:
        """Drop the prefix cache (at the next boundary)."""
        self.between_steps(self.cache.clear, drain=False)

    def load(self) -> dict[str, int]:
        with self._cv:
            return {"running": len(self._running), "waiting": len(self._waiting), "cached_tokens": self.cache.tokens}

    def _retry_after(self) -> float:
        return float(max(1, min(30, len(self._waiting) // max(self.limits.max_batch, 1))))

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name=f"orchard-batch-{self.model.name}", daemon=True)
            self._thread.start()

    # -- the engine's thread ----------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not (self._running or self._tasks or self._admissible()):
                    if self.closed and not self._waiting:
                        self._thread = None
                        return
                    self._cv.wait()
                tasks = self._due_tasks()
                joining = [] if any(drain for _, drain, _ in self._tasks) else self._admit()
            try:
                for fn, drain, done in tasks:
                    self._run_task(fn, drain, done)
                for request in joining:
                    self._prepare(request)
                self._drop_finished()
                if self._running:
                    self._step()
            except Exception as exc:  # a fault of the engine itself: no consumer is left waiting forever
                for request in list(self._running):
                    self._running.remove(request)
                    self._finish(request, exc)

    def _admissible(self) -> bool:
        if not self._waiting or any(drain for _, drain, _ in self._tasks):
            return False
        if len(self._running) >= self.limits.max_batch:
            return False
        used = sum(r.reserve for r in self._running)
        return not self._running or used + self._waiting[0].reserve <= self.limits.max_kv_tokens

    def _admit(self) -> list[Request]:
        joining = []
        while self._admissible():
            request = self._waiting.pop(0)
            if request.cancel.is_set():
                self._finish(request)
                continue
            self._running.append(request)
            joining.append(request)
        self.peak_batch = max(self.peak_batch, len(self._running))
        return joining

    def _due_tasks(self) -> list[tuple[Callable[[], Any], bool, Any]]:
        due = [t for t in self._tasks if not t[1] or not self._running]
        self._tasks = [t for t in self._tasks if t not in due]
        return due

    def _run_task(self, fn: Callable[[], Any], drain: bool, done: Any) -> None:
        try:
            with self.model.lock:
                value = fn()
            if drain:
                self.cache.clear()  # computed by the weights just replaced
            done.put((True, value))
        except BaseException as exc:  # handed to the caller
            done.put((False, exc))

    def _prepare(self, request: Request) -> None:
        try:
            slot, reused = self.cache.take(request.prompt_ids) if self.model.prefix_cache else (None, 0)
            if slot is None:
                slot = self.runner.slot(request.reserve)
        except BaseException as exc:  # no memory for its cache: this request fails, the others go on
            self._running.remove(request)
            self._finish(request, exc)
            return
        request.slot, request.pending = slot, request.prompt_ids[reused:]
        request.info["reused"] = reused
        request.info["weight_version"] = self.model.weight_version

    def _drop_finished(self) -> None:
        for request in [r for r in self._running if r.ended or r.cancel.is_set()]:
            self._running.remove(request)
            self._finish(request)

    def _finish(self, request: Request, error: BaseException | None = None) -> None:
        if error is not None:
            request.out.put(error)
        elif request.slot is not None and self.model.prefix_cache:  # every token it holds was fed whole
            self.cache.put(request.slot)
        request.slot = None
        if not request.done:
            request.done = True
            request.out.put(_DONE)

    def _step(self) -> None:
        import torch

        from orchard_cli.models.sampling import Step, sample

        feeds, want, active = [], [], []
        budget = max(self.limits.step_tokens, 1)
        for request in self._running:  # decoding requests first: one token each
            if request.decoding:
                feeds.append((request.slot, request.pending))
                want.append(True)
                active.append(request)
        for request in self._running:  # then prompt chunks, first come first served
            if request.decoding or budget <= 0:
                continue
            chunk = request.pending[:budget]
            budget -= len(chunk)
            feeds.append((request.slot, chunk))
            want.append(len(chunk) == len(request.pending))
            active.append(request)
        if not feeds:
            return
        try:
            with self.model.lock, torch.inference_mode():
                logits = self.runner.forward(feeds, want)
        except BaseException as exc:  # the caches are half-written: every request in this pass ends
            for request in active:
                request.slot = None
                request.done = True
                request.out.put(exc)
                self._running.remove(request)
            return
        self.steps += 1
        row = 0
        for request, (_, fed), wanted in zip(active, feeds, want):
            request.pending = request.pending[len(fed):]
            if not wanted:
                continue
            request.decoding = True
            values = logits[row]
            row += 1
            logprobs = torch.log_softmax(values, dim=-1)
            if request.temperature > 0:
                token = sample(torch, values, request.temperature, request.top_p, request.generator)
            else:
                token = int(torch.argmax(values))
            top: list[tuple[int, float]] = []
            if request.top_logprobs:
                best, indices = torch.topk(logprobs, request.top_logprobs)
                top = [(int(i), float(v)) for i, v in zip(indices, best)]
            step = Step(token, float(logprobs[token]), top)
            if token in self.model.stop_ids:
                request.info["stop"] = step
                request.ended = True
                continue
            request.out.put(step)
            request.produced += 1
            if request.produced >= request.max_tokens:
                request.ended = True
            else:
                request.pending = [token]
