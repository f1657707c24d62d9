"""Episodes: one harness run each, with its own token, route, caps and list of call records.

The token is what the harness uses as its API key (and in its base URL); the proxy swaps it for
the real upstream key, so the real key never enters the sandbox. A token stops working when its
episode closes.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import TYPE_CHECKING, Any

from orchard_cli.proxy.calls import CallRecord, EpisodeSummary

if TYPE_CHECKING:
    from orchard_cli.proxy.calls import CallUsage


class Episode:
    """State shared by the proxy's loop (writes) and the run's thread (reads)."""

    def __init__(self, episode_id: str, root_url: str, *, token: str | None = None,
                 max_calls: int | None = None, max_tokens: int | None = None, keep: bool = True,
                 tools: Any = None, record_limit: int | None = None) -> None:
        self.id = episode_id
        self.token = token or f"orch-ep-{secrets.token_urlsafe(24)}"
        self.base_url = f"{root_url}/e/{self.token}/v1"
        self.tools = tools
        """The episode's `ToolSession` (served at `<root>/e/<token>/tools`), or None."""
        self.max_calls, self.max_tokens = max_calls, max_tokens
        self.record_limit = record_limit
        """Bytes of model calls the episode's records may hold (ProxyConfig.max_record_bytes)."""
        self._recorded = 0
        self.capped: str | None = None
        self.keep = keep
        self.calls = 0  # recorded calls (refused ones included)
        self._counts = {"errors": 0, "infra_errors": 0, "input_tokens": 0, "output_tokens": 0}
        self.closed = False
        self.opened_at = time.time()
        self._records: list[CallRecord] = []
        self._admitted = 0
        self._tokens = 0
        self._inflight = 0
        self._idle = threading.Condition()
        self._registry: dict[str, Episode] | None = None  # the proxy's token table, set on open

    @property
    def api_key(self) -> str:
        """The key to give the harness: valid for this episode only, while it is open."""
        return self.token

    def env(self, key_var: str = "OPENAI_API_KEY", base_url_var: str = "OPENAI_BASE_URL") -> dict[str, str]:
        """Environment variables for a harness: this episode's URL and token, never the real key."""
        return {key_var: self.token, base_url_var: self.base_url}

    # -- the proxy's side (event loop thread) --------------------------------------------------
    def admit(self) -> tuple[int, str | None]:
        """Count a new call: its sequence number, and why it is refused when over a cap."""
        seq = self._admitted
        self._admitted += 1
        with self._idle:
            self._inflight += 1
        if self.capped:  # a ceiling reached on the way (the records'): nothing more
            return seq, self.capped
        if self.max_calls is not None and seq >= self.max_calls:
            self.capped = self.capped or f"max_calls={self.max_calls} reached"
            return seq, self.capped
        if self.max_tokens is not None and self._tokens >= self.max_tokens:
            self.capped = self.capped or f"max_tokens={self.max_tokens} reached ({self._tokens} used)"
            return seq, self.capped
        return seq, None

    def over_records(self, size: int) -> str | None:
        """Count a finished call's `size` bytes against the records ceiling; past it, why (the
        call's record then keeps no bodies, and the episode is capped)."""
        with self._idle:
            if self.record_limit is None or self._recorded + size <= self.record_limit:
                self._recorded += size
                return None
            self.capped = self.capped or (f"records ceiling: its model calls reached {self.record_limit} bytes "
                                          "(ProxyConfig.max_record_bytes)")
            return self.capped

    def add(self, record: CallRecord, usage: CallUsage | None, wire_bytes: int = 0) -> None:
        """Count a finished call. Without reported usage (a stream without include_usage), the
        token cap counts bytes on the wire / 4: rough, on the high side, never zero."""
        counts = self._counts
        if usage is not None:
            self._tokens += usage.total_tokens
            counts["input_tokens"] += usage.input_tokens
            counts["output_tokens"] += usage.output_tokens
        elif record.upstream_endpoint is not None:
            self._tokens += wire_bytes // 4
        if record.error is not None:
            counts["errors"] += 1
            counts["infra_errors"] += record.error.type == "infra"
        with self._idle:
            self.calls += 1
            if self.keep:
                self._records.append(record)
            self._inflight -= 1
            self._idle.notify_all()

    def abandon(self) -> None:
        """A call that ends without a record (a bug path): keep the in-flight count right."""
        with self._idle:
            self._inflight -= 1
            self._idle.notify_all()

    # -- the run's side ------------------------------------------------------------------------
    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until every admitted call has its record (the harness may exit a moment before)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight <= 0, timeout)

    @property
    def records(self) -> list[CallRecord]:
        """The episode's call records in arrival order (while it is open, waits briefly for calls
        in flight; `close` already waited)."""
        if not self.closed:
            self.wait_idle()
        with self._idle:
            return sorted(self._records, key=lambda r: r.seq)

    def close(self, timeout: float = 10.0) -> EpisodeSummary:
        """Revoke the token (later calls get 401) and summarize the episode (calls still in flight
        after `timeout` are left out)."""
        self.wait_idle(timeout)
        self.closed = True
        if self._registry is not None:
            self._registry.pop(self.token, None)
        return self.summary(wait=False)

    def progress(self) -> tuple[int, int, int]:
        """(calls made, the one in flight included; tokens in; tokens out of finished calls), without
        waiting on calls in flight: for a person watching."""
        counts = self._counts
        return self._admitted, counts["input_tokens"], counts["output_tokens"]

    @property
    def tokens_used(self) -> int:
        return self._tokens

    def summary(self, wait: bool = True) -> EpisodeSummary:
        if wait:
            self.wait_idle()
        return EpisodeSummary(episode=self.id, calls=self.calls, capped=self.capped, **self._counts)
