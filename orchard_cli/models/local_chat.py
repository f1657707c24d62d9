"""One chat completion on a local model, as OpenAI chunks or as one whole completion.

`ChatJob(model, body).chunks()` yields `chat.completion.chunk` dicts while the model generates;
afterwards `job.completion()` is the same answer as one `chat.completion` (the non-streamed form is
built from the very same run, so both forms always agree). Tool calls use orchard's format (see
`orchard_cli.models.toolcall`): while tools are offered, text from the first `<tool_call>` (or a
``` fence, when a shell tool is offered) is held back until the reply is complete and parsed.

Request fields honoured: messages, tools, tool_choice, max_tokens / max_completion_tokens,
temperature, top_p, seed, stop, logprobs, top_logprobs, return_token_ids (vLLM's: `token_ids` per
choice, `prompt_token_ids` at the top), stream, stream_options.include_usage. `n` must be 1.
Once the model's weights have a version (`LocalModel.weight_version`: an RL run's synced copy), every
chunk and completion names it at the top level (`weight_version`, as SGLang's `meta_info` does); the
recording proxy keeps it on the call record.
Image parts (`image_url` with a data URL) reach a vision-language model (`LocalModel.vision`); a
text model reads them as '[image]'.

As vLLM does, a reply that ended on the model's end-of-turn token has that token as the last of its
`token_ids` (and of its log-probabilities, when asked): the policy sampled it, and an RL learner
trains on it (`orchard rollout`). It is never part of the text, nor of `completion_tokens`.
"""

from __future__ import annotations

import threading
import time
from contextlib import closing
from typing import Any, Iterator

from orchard_cli.errors import UsageError
from orchard_cli.models import toolcall
from orchard_cli.models.local_model import LocalModel

DEFAULT_MAX_TOKENS = 512


class ContextLengthError(UsageError):
    """The prompt does not fit in the model's context window."""


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise UsageError(f"{key} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _stops(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > 4:
        raise UsageError("stop must be a string or a list of at most 4 strings")
    return [s for s in stops if s]


class ChatJob:
    """A validated chat request, ready to run on `model` (blocking; run it in a worker thread)."""

    def __init__(self, model: LocalModel, body: dict[str, Any], *, default_temperature: float = 0.0,
                 default_max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise UsageError("messages must be a non-empty list of message objects")
        if (body.get("n") or 1) != 1:
            raise UsageError("this server generates one choice per request (n=1)")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise UsageError("tools must be a list")
        self.model, self.body = model, body
        self.tools, self.tool_choice = tools or [], body.get("tool_choice")
        self.temperature = _number(body, "temperature", default_temperature, 0.0, 2.0)
        self.top_p = _number(body, "top_p", 1.0, 0.0, 1.0) or 1.0
        self.top_logprobs = int(_number(body, "top_logprobs", 0, 0, 20))
        self.want_logprobs = bool(body.get("logprobs")) or self.top_logprobs > 0
        self.want_ids = bool(body.get("return_token_ids"))
        self.stops = _stops(body.get("stop"))
        self.holds = toolcall.markers(self.tools, self.tool_choice)
        if self.holds:  # the model writing a tool's result itself: the call is over, the rest is invented
            self.stops.append(toolcall.RESPONSE_OPEN)
        seed = body.get("seed")
        self.seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
        self.forced = toolcall.forced_start(self.tools, self.tool_choice)
        vision = getattr(model, "vision", None)  # a vision-language model's VisionPrompts; None: text
        if vision is not None:
            self.prompt_ids, self.inputs = vision.encode(messages, self.tools, self.tool_choice, self.forced)
        else:
            rendered = toolcall.render_messages(messages, self.tools, self.tool_choice)
            self.prompt_ids, self.inputs = model.encode_chat(rendered, prefix=self.forced), {}
        room = model.context - len(self.prompt_ids)
        if room <= 0:
            raise ContextLengthError(
                f"the prompt is {len(self.prompt_ids)} tokens; {model.name} holds {model.context}",
                hint="shorten the conversation or the system prompt")
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        if asked is not None and (isinstance(asked, bool) or not isinstance(asked, int) or asked < 1):
            raise UsageError(f"max_tokens must be a positive integer, got {asked!r}")
        self.max_tokens = min(asked or default_max_tokens, room)
        self.id = f"chatcmpl-{time.time_ns():x}"
        self.created = int(time.time())
        self.token_ids: list[int] = []
        self.stats: dict[str, Any] = {"reused": 0}
        self.request: Any = None  # its place in the model's batch, once admitted
        self.engine: Any = None  # the batch it was admitted to
        self.logprobs: list[dict[str, Any]] = []
        self.content: str | None = None
        self.tool_calls: list[dict[str, Any]] = []
        self.finish_reason = "stop"
        self.error: str | None = None
        self.end_id: int | None = None

    def _head(self) -> dict[str, Any]:
        head = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model.name}
        version = self.stats.get("weight_version", getattr(self.model, "weight_version", None))
        if version is not None:  # which weights answered (an RL run's synced copy)
            head["weight_version"] = version
        return head

    def _entry(self, token_id: int, logprob: float, top: list[tuple[int, float]]) -> dict[str, Any]:
        token = self.model.decode([token_id])
        return {"token": token, "logprob": logprob, "bytes": list(token.encode()),
                "top_logprobs": [{"token": (t := self.model.decode([i])), "logprob": lp, "bytes": list(t.encode())}
                                 for i, lp in top]}

    def _chunk(self, delta: dict[str, Any], ids: list[int], entries: list[dict[str, Any]],
               finish: str | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if self.want_logprobs and entries:
            choice["logprobs"] = {"content": entries}
        if self.want_ids and ids:
            choice["token_ids"] = ids
        return {**self._head(), "choices": [choice]}

    def usage(self) -> dict[str, Any]:
        return {"prompt_tokens": len(self.prompt_ids), "completion_tokens": len(self.token_ids),
                "total_tokens": len(self.prompt_ids) + len(self.token_ids),
                "prompt_tokens_details": {"cached_tokens": self.stats["reused"]}}

    def admit(self, cancel: threading.Event | None = None) -> None:
        """Queue the request in the model's batch now (when batching is on): past the server's
        caps this raises `batching.Busy` (HTTP 429) before any answer has begun. `chunks` and
        `run` admit by themselves otherwise; `cancel` set later frees its place."""
        engine = getattr(self.model, "engine", None)
        if engine is None or self.inputs or self.request is not None:
            return
        self.engine = engine  # streamed from where it was admitted (an adapter swap may unset model.engine)
        self.request = engine.submit(self.prompt_ids, max_tokens=self.max_tokens, temperature=self.temperature,
                                     top_p=self.top_p, seed=self.seed, top_logprobs=self.top_logprobs,
                                     cancel=cancel, info=self.stats)

    def _steps(self, cancel: threading.Event | None) -> Iterator[Any]:
        self.admit(cancel)
        if self.request is not None:  # (admitted with `cancel`, or closing the stream frees the place)
            return self.engine.stream(self.request)
        return self.model.steps(self.prompt_ids, max_tokens=self.max_tokens, temperature=self.temperature,
                                top_p=self.top_p, seed=self.seed, top_logprobs=self.top_logprobs,
                                inputs=self.inputs, cancel=cancel, info=self.stats)

    def chunks(self, cancel: threading.Event | None = None) -> Iterator[dict[str, Any]]:
        """Generate, yielding chunks as text becomes safe to show; ends with the finish chunk."""
        first = self._chunk({"role": "assistant", "content": ""}, [], [])
        if self.want_ids:
            first["prompt_token_ids"] = list(self.prompt_ids)
        yield first
        emitted, reply, pending_ids, pending = 0, self.forced, [], []
        stopped = False
        hold_space = bool(self.holds)
        steps = self._steps(cancel)
        with closing(steps):  # a stop string ends the generation (and frees the model) at once
            for step in steps:
                self.token_ids.append(step.token_id)
                pending_ids.append(step.token_id)
                if self.want_logprobs:
                    entry = self._entry(step.token_id, step.logprob, step.top)
                    self.logprobs.append(entry)
                    pending.append(entry)
                text = self.model.decode(self.token_ids)
                if text.endswith("\ufffd"):  # half of a multi-byte character: wait for the rest
                    continue
                reply = self.forced + text
                hits = [reply.find(s, len(self.forced)) for s in self.stops]
                hits = [h for h in hits if h >= 0]
                if hits:
                    reply, stopped = reply[:min(hits)], True
                safe = toolcall.safe_length(reply, self.holds + tuple(self.stops), hold_space)
                if safe > emitted or pending_ids and (self.want_ids or self.want_logprobs):
                    delta = reply[emitted:safe] if safe > emitted else ""
                    emitted = max(emitted, safe)
                    yield self._chunk({"content": delta}, pending_ids, pending)
                    pending_ids, pending = [], []
                if stopped:
                    break
            else:
                if len(self.token_ids) >= self.max_tokens:
                    self.finish_reason = "length"
        if not stopped:
            reply = self.forced + self.model.decode(self.token_ids)
        shown = reply[:emitted]
        parsed = toolcall.parse_reply(reply, self.tools, self.tool_choice, truncated=self.finish_reason == "length")
        self.content, self.tool_calls, self.error = parsed.content, parsed.tool_calls, parsed.error
        final = self.content or ""
        rest = final[len(shown):] if final.startswith(shown) else ""
        end = self.stats.get("stop")
        if end is not None and not stopped and (self.want_ids or self.want_logprobs):
            self.end_id = end.token_id  # the model's own end of turn (not a stop string)
            pending_ids.append(end.token_id)
            if self.want_logprobs:
                entry = self._entry(end.token_id, end.logprob, end.top)
                self.logprobs.append(entry)
                pending.append(entry)
        if rest or pending_ids and (self.want_ids or self.want_logprobs):
            yield self._chunk({"content": rest}, pending_ids, pending)
        if self.tool_calls:
            self.finish_reason = "tool_calls"
            for i, call in enumerate(self.tool_calls):
                yield self._chunk({"tool_calls": [{"index": i, **call}]}, [], [])
        yield self._chunk({}, [], [], self.finish_reason)
        if (self.body.get("stream_options") or {}).get("include_usage"):
            yield {**self._head(), "choices": [], "usage": self.usage()}

    def run(self, cancel: threading.Event | None = None) -> dict[str, Any]:
        """Generate to the end and return the whole `chat.completion`."""
        for _ in self.chunks(cancel):
            pass
        return self.completion()

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": self.finish_reason,
                                  "logprobs": {"content": self.logprobs} if self.want_logprobs else None}
        if self.want_ids:
            choice["token_ids"] = list(self.token_ids) + ([self.end_id] if self.end_id is not None else [])
        out = {**self._head(), "object": "chat.completion", "choices": [choice], "usage": self.usage()}
        if self.want_ids:
            out["prompt_token_ids"] = list(self.prompt_ids)
        return out
