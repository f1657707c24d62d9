"""The recording proxy: an OpenAI-compatible server that forwards a harness's model calls to the
upstream model and records each one (`CallRecord`), per episode.

- Dialects: `/v1/chat/completions`, `/v1/responses` (streamed or not) and `/v1/models`. A Responses
  call to an upstream that speaks only chat completions is translated, streaming events included.
  Chat completions over a Responses-only upstream are not supported (answered 501).
- Episodes: `proxy.open_episode()` gives a token and a base URL `.../e/<token>/v1`; the token is
  the harness's API key and is swapped for the real upstream key, which never enters a sandbox.
- Caps: calls and tokens per episode; over a cap the harness gets a 400 and the episode is capped.
  An episode's records hold at most `max_record_bytes` (past it: kept without bodies, capped); a
  request over `max_request_bytes` is refused with 413 unread.
- Failures: 429/5xx and refused connections are retried with backoff (bounded); a timeout, an
  unreachable upstream or a stream cut mid-way is recorded as an infra error on the call.
"""

from orchard_cli.proxy.config import ProxyConfig
from orchard_cli.proxy.routes import Episode
from orchard_cli.proxy.calls import (
    SCHEMA_VERSION,
    CallError,
    CallRecord,
    CallTiming,
    CallUsage,
    EpisodeSummary,
    read_records,
)
from orchard_cli.proxy.runner import ProxyHandle, serve_proxy, start_proxy

__all__ = ["SCHEMA_VERSION", "CallError", "CallRecord", "CallTiming", "CallUsage", "Episode",
           "EpisodeSummary", "ProxyConfig", "ProxyHandle", "read_records", "serve_proxy", "start_proxy"]
