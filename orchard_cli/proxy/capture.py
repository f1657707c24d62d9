"""Turning a finished call into a `CallRecord`, after the harness already has its answer."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from orchard_cli.proxy.calls import REDACTED, CallError, CallRecord, CallTiming, CallUsage
from orchard_cli.proxy.sse import assemble_chat_stream, assemble_responses_stream

if TYPE_CHECKING:
    from orchard_cli.proxy.routes import Episode
    from orchard_cli.proxy.server import ProxyServer

log = logging.getLogger("orchard.proxy")
_UNSET = object()


class Call:
    """What the hot path knows about one call: raw bytes and timestamps, nothing parsed."""

    __slots__ = ("episode", "endpoint", "raw", "seq", "t0", "started_at", "first_byte", "ended",
                 "status", "stream", "parts", "response", "upstream_endpoint", "upstream_request",
                 "upstream_response", "attempts", "error", "_body")

    def __init__(self, episode: Episode, endpoint: str, raw: bytes, seq: int, t0: float,
                 started_at: float) -> None:
        self.episode, self.endpoint, self.raw, self.seq = episode, endpoint, raw, seq
        self.t0, self.started_at = t0, started_at
        self.first_byte: float | None = None
        self.ended = t0
        self.status = 0
        self.stream = False
        self.parts: list[bytes] = []
        self.response: Any = None
        self.upstream_endpoint: str | None = None
        self.upstream_request: Any = None
        self.upstream_response: Any = None
        self.attempts = 0
        self.error: dict[str, Any] | None = None
        self._body: Any = _UNSET

    def parsed_body(self) -> Any:
        """The request body as JSON (parsed once), or its text when it is not JSON."""
        if self._body is _UNSET:
            try:
                self._body = json.loads(self.raw)
            except ValueError:
                self._body = self.raw.decode("utf-8", "replace")
        return self._body

    def fail(self, kind: str, message: str, status: int | None) -> None:
        if self.error is None or self.error["type"] == "upstream":
            self.error = {"type": kind, "message": message, "status": status}
        if status is not None and kind != "upstream" and not self.stream:
            self.status = status


def _usage(obj: Any) -> CallUsage | None:
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(usage, dict):
        return None
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        inp, out = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    else:
        inp, out = usage.get("input_tokens") or 0, usage.get("output_tokens") or 0
        cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
        reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
    return CallUsage(input_tokens=inp, output_tokens=out, total_tokens=usage.get("total_tokens") or inp + out,
                     cached_tokens=cached, reasoning_tokens=reasoning)


def _tokens(obj: Any, dialect: str | None) -> tuple[list[int] | None, list[int] | None, list[float] | None]:
    """(prompt token ids, completion token ids, completion logprobs) when the upstream sent them."""
    if not isinstance(obj, dict):
        return None, None, None
    if dialect == "chat":
        choice = (obj.get("choices") or [{}])[0]
        entries = (choice.get("logprobs") or {}).get("content") or []
        return obj.get("prompt_token_ids"), choice.get("token_ids"), [e["logprob"] for e in entries] or None
    logprobs = [e["logprob"] for item in obj.get("output") or () if item.get("type") == "message"
                for part in item.get("content") or () for e in part.get("logprobs") or ()]
    return None, None, logprobs or None


def _weight_version(obj: Any) -> str | None:
    """The weight version a server put on its answer (top level, or SGLang's meta_info)."""
    if not isinstance(obj, dict):
        return None
    found = obj.get("weight_version")
    if found is None and isinstance(obj.get("meta_info"), dict):
        found = obj["meta_info"].get("weight_version")
    return None if found is None else str(found)


def _response(call: Call) -> Any:
    if call.response is not None or not call.parts:
        return call.response
    blob = b"".join(call.parts)
    if call.stream:
        return assemble_chat_stream(blob) if call.endpoint == "chat" else assemble_responses_stream(blob)
    try:
        return json.loads(blob)
    except ValueError:
        return blob.decode("utf-8", "replace")


def build_record(call: Call, call_id: str, secret: bytes | None) -> tuple[CallRecord, CallUsage | None]:
    response = _response(call)
    if isinstance(response, str) and call.status == 200 and not call.stream and call.error is None:
        # the harness got the body as it came; the record says the upstream was not answering right
        call.error = {"type": "infra", "message": "the upstream answered 200 with a body that is not JSON",
                      "status": 200}
    wire = call.upstream_response if call.upstream_response is not None else response
    usage = _usage(response) or _usage(call.upstream_response)
    prompt_ids, completion_ids, logprobs = _tokens(wire, call.upstream_endpoint or call.endpoint)
    request = call.parsed_body()
    t0 = call.t0
    record = CallRecord(
        id=call_id, episode=call.episode.id, seq=call.seq,
        endpoint=call.endpoint, upstream_endpoint=call.upstream_endpoint, stream=call.stream,
        model=request.get("model") if isinstance(request, dict) else None, status=call.status,
        request=request, response=response, upstream_request=call.upstream_request,
        upstream_response=call.upstream_response, usage=usage, prompt_token_ids=prompt_ids,
        completion_token_ids=completion_ids, logprobs=logprobs, weight_version=_weight_version(wire),
        attempts=call.attempts,
        timing=CallTiming(started_at=call.started_at,
                          first_byte_ms=None if call.first_byte is None else (call.first_byte - t0) * 1e3,
                          ended_ms=(call.ended - t0) * 1e3),
        error=CallError(**call.error) if call.error else None)
    if secret and (secret in call.raw or any(secret in part for part in call.parts)):
        text = record.model_dump_json().replace(secret.decode(), REDACTED)
        record = CallRecord.model_validate_json(text)
    return record, usage


def _drop_bodies(call: Call, size: int, why: str) -> None:
    """The call's record past the episode's records ceiling: its metadata, no bodies, marked."""
    call._body = f"[orchard: not kept, {size} bytes on the wire: {why}]"
    call.parts, call.response, call.upstream_request, call.upstream_response = [], None, None, None
    if call.error is None:
        call.error = {"type": "capped", "message": f"request and answer not kept: {why}", "status": call.status}


def finish_call(call: Call, server: ProxyServer) -> None:
    """Record the call in its episode and the calls file. Never raises into the request path."""
    try:
        size = len(call.raw) + sum(len(part) for part in call.parts)
        cut = call.episode.over_records(size)
        if cut:
            _drop_bodies(call, size, cut)
        record, usage = build_record(call, server.next_call_id(), server._secret)
    except Exception:  # a bug here must not break the harness's call
        log.exception("orchard proxy: could not record call %s of episode %s", call.seq, call.episode.id)
        call.episode.abandon()
        return
    call.episode.add(record, usage, size)
    if server.writer is not None:
        server.writer.write(record)

