"""The recording proxy's configuration: one typed model, used by the CLI and the Python API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.models.base import Dialect


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    upstream_url: str = Field(description="Upstream base URL (ending at the API root, e.g. .../v1).")
    upstream_dialects: list[Dialect] = Field(
        default_factory=lambda: ["chat"],
        description="APIs the upstream speaks. Responses calls are translated to chat when "
                    "'responses' is missing; chat calls need 'chat'.")
    key_env: str | None = Field(None, description="Environment variable holding the upstream key.")
    model: str | None = Field(None, description="Replace the model name of every forwarded call.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Fields merged into every upstream request, e.g. {'logprobs': true}.")
    host: str = Field("127.0.0.1", description="Interface to listen on (loopback by default).")
    port: int = Field(0, ge=0, le=65535, description="Port to listen on; 0 picks a free one.")
    advertise_url: str | None = Field(
        None, description="Root URL harnesses use to reach the proxy when it differs from the bound "
                          "address, e.g. http://172.17.0.1:8787 from inside a Docker container.")
    out: Path | None = Field(None, description="Append one JSON line per call to this file.")
    max_calls: int | None = Field(None, ge=1, description="Default per-episode cap on calls.")
    max_tokens: int | None = Field(None, ge=1, description="Default per-episode cap on total tokens.")
    max_request_bytes: int = Field(
        32 << 20, ge=1024,
        description="Largest request body a model call may send (bytes): a larger one is refused with "
                    "413 before it is read. 32 MiB holds a long context with its images; raise it for more.")
    max_record_bytes: int | None = Field(
        128 << 20, ge=1,
        description="Per episode: bytes of model calls (requests and answers on the wire) kept in its "
                    "records. The call that passes it keeps its record without the bodies (marked: error "
                    "type 'capped'), and the episode is capped (later calls get 400). None: no ceiling.")
    max_retries: int = Field(3, ge=0, le=10, description="Retries on 429/5xx and refused connections.")
    retry_backoff_s: float = Field(0.5, ge=0, description="First retry delay; doubles each retry.")
    connect_timeout_s: float = Field(10.0, gt=0, description="Connecting to the upstream.")
    read_timeout_s: float = Field(600.0, gt=0, description="Longest silence from the upstream.")
    keep_records: bool = Field(
        True, description="Keep each episode's records in memory (off for a long-running standalone "
                          "proxy, which only appends them to `out`).")
    episode_header: bool = Field(
        False, description="Name the episode of each forwarded call in the X-Orchard-Episode header "
                           "(for an in-package endpoint that answers per episode: gold).")
    auto_episodes: bool = Field(
        False, description="Standalone mode: /e/<name>/v1 opens episode <name> on first use and "
                           "/v1 serves the episode 'default'. Off: only opened episode tokens work.")
