"""A `ToolSession`: one episode's tools, the backend that performs them, and the dispatch log."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Protocol, runtime_checkable

from orchard_cli.evidence import Dispatch
from orchard_cli.tools.spec import ARGUMENTS_LIMIT, DISPATCH_LOG_LIMIT, ToolReply, ToolSpec

RESULT_LIMIT = 20000
"""A result longer than this (as JSON text) is cut in the dispatch log, never in the reply."""


@runtime_checkable
class ToolBackend(Protocol):
    def call(self, service: str, action: str, arguments: dict[str, Any]) -> ToolReply:
        """Perform one call against the episode's services; never raises for a bad argument
        (a 400 reply) or a missing item (404). Raises only when the service itself is gone."""


class ToolSession:
    """Thread-safe: the proxy's gateway and a gold solver call it from any thread."""

    def __init__(self, specs: list[ToolSpec], backend: ToolBackend, *, log_limit: int = DISPATCH_LOG_LIMIT) -> None:
        self.specs = {s.name: s for s in specs}
        self.backend = backend
        self.log_limit = log_limit
        """Bytes the dispatch log may hold (DISPATCH_LOG_LIMIT)."""
        self._logged = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0
        self.closed = False
        self._dispatches: list[Dispatch] = []
        self.failure: str | None = None
        """Set when a service failed under a call (the episode is an infra_error, not the agent's)."""

    def close(self, timeout: float = 30.0) -> bool:
        """The episode is over: refuse further calls and wait for those in flight (a harness that
        timed out may leave one running). True when none is left running."""
        with self._idle:
            self.closed = True
            return self._idle.wait_for(lambda: self._active == 0, timeout)

    def public(self) -> list[dict[str, Any]]:
        return [s.public() for s in self.specs.values()]

    def call(self, name: str, arguments: Any) -> ToolReply:
        """Validate, perform and record one call. An unknown tool or bad arguments is a recorded
        400/404 reply (the agent's mistake); arguments over ARGUMENTS_LIMIT a 413 (recorded without
        them); a call once the dispatch log is full a 429 (recorded cut). A service that is gone (a
        connection refused or cut, a timeout) is a 503 reply and sets `failure`; a service that
        answers with a refusal is the backend's 4xx reply; any other error of the service is a 500
        reply. After `close`, a call is refused (409) and not recorded."""
        with self._idle:
            if self.closed:
                return ToolReply(ok=False, status=409, error="the episode is over")
            self._active += 1
        try:
            return self._call(name, arguments)
        finally:
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def refuse_oversized(self, name: str, size: int) -> ToolReply:
        """A call whose arguments (`size` bytes) are over ARGUMENTS_LIMIT, refused unread (the
        gateway, before reading the body): recorded without them."""
        reply = ToolReply(ok=False, status=413, error=oversized(size))
        self._record(name, {"_cut": f"{size} bytes of arguments, not kept"}, reply)
        return reply

    def _call(self, name: str, arguments: Any) -> ToolReply:
        spec = self.specs.get(name)
        size = _size(arguments)
        if size > ARGUMENTS_LIMIT:
            return self.refuse_oversized(name, size)
        if self._logged >= self.log_limit:
            reply = ToolReply(ok=False, status=429, error=f"this episode's tool log is full ({self.log_limit} "
                                                          "bytes of arguments and results): no further tool calls")
        elif spec is None:
            reply = ToolReply(ok=False, status=404, error=f"no tool named {name!r}")
        elif not isinstance(arguments, dict):
            reply = ToolReply(ok=False, status=400, error="arguments must be a JSON object")
        else:
            problem = schema_problem(spec.input_schema, arguments)
            if problem:
                reply = ToolReply(ok=False, status=400, error=problem)
            else:
                try:
                    reply = self.backend.call(spec.service, spec.action, arguments)
                except Exception as exc:  # noqa: BLE001 - sorted below: gone (503) or failed (500)
                    if _gone(exc):  # refused, cut, timed out: the service is gone
                        reply = ToolReply(ok=False, status=503, error=f"{spec.service} failed: {type(exc).__name__}: {exc}")
                        self.failure = self.failure or reply.error
                    else:  # the service failed on this call: the agent sees it
                        reply = ToolReply(ok=False, status=500, error=f"{spec.service}: {type(exc).__name__}: {exc}")
        kept = arguments if isinstance(arguments, dict) else {"_raw": arguments}
        if reply.status == 429:
            kept = {"_cut": f"{size} bytes of arguments, not kept: the tool log is full"}
        self._record(name, kept, reply, size)
        return reply

    def _record(self, name: str, arguments: dict[str, Any], reply: ToolReply, size: int = 0) -> None:
        result = reply.result if reply.ok else {"error": reply.error}
        result = _cut(result)
        with self._lock:
            self._logged += size + len(json.dumps(result, default=str))
            self._dispatches.append(Dispatch(seq=len(self._dispatches), tool=name, arguments=arguments,
                                             status=reply.status, result=result, at=time.time()))

    @property
    def dispatches(self) -> list[Dispatch]:
        with self._lock:
            return list(self._dispatches)


def _cut(value: Any) -> Any:
    text = json.dumps(value, default=str)
    return value if len(text) <= RESULT_LIMIT else {"truncated": text[:RESULT_LIMIT]}


def _size(arguments: Any) -> int:
    """Bytes of the arguments as UTF-8 JSON (what the gateway reads off the wire)."""
    try:
        return len(json.dumps(arguments, ensure_ascii=False, default=str).encode("utf-8", "replace"))
    except (TypeError, ValueError):
        return 0


def oversized(size: int) -> str:
    """The refusal of arguments over ARGUMENTS_LIMIT (the same words in every place that checks)."""
    return (f"the arguments are {size} bytes, over the {ARGUMENTS_LIMIT} bytes one tool call may send: "
            "send less at once (write large content to a file in the workspace instead)")


def _gone(exc: BaseException) -> bool:
    """Whether an exception means the service is gone (a connection refused, reset or cut, a
    timeout), not that it answered with a refusal (an SMTP reply code, say)."""
    import smtplib

    if isinstance(exc, (smtplib.SMTPResponseException, smtplib.SMTPRecipientsRefused)):
        return False
    return isinstance(exc, (OSError, EOFError))


def schema_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Why `arguments` do not fit `schema` (one line), or None. Uses jsonschema when installed."""
    try:
        import jsonschema
    except ImportError:
        missing = [k for k in schema.get("required", []) if k not in arguments]
        return f"missing required argument(s): {', '.join(missing)}" if missing else None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"invalid arguments{' at ' + where if where else ''}: {error.message}"
