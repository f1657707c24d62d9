"""The `ModelEndpoint` seam: anything that answers OpenAI-compatible calls at a base URL.

An endpoint is started (a hosted API needs nothing; a scripted or local model starts a loopback
server), described by an `EndpointInfo`, and stopped. The API key is never part of the info: it is
read from the environment variable the user named (`key_env`) when a client needs it, so it is
never written to disk and never passed on a command line.
"""

from __future__ import annotations

import os
from typing import Any, Literal, Mapping, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import AuthError, UsageError

Dialect = Literal["chat", "responses"]


class EndpointInfo(BaseModel):
    """Where and how to call a started endpoint. Safe to log and to write to disk (no secrets)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Registry name of the endpoint kind (openai, scripted, ...).")
    base_url: str = Field(description="OpenAI-style base URL ending in the API root, e.g. http://h:p/v1.")
    model: str | None = Field(None, description="Model name to send; None keeps the client's choice.")
    dialects: list[Dialect] = Field(
        default_factory=lambda: ["chat"],
        description="APIs the endpoint speaks: 'chat' (/chat/completions) and/or 'responses'.",
    )
    key_env: str | None = Field(None, description="Name of the environment variable holding the key.")


@runtime_checkable
class ModelEndpoint(Protocol):
    """A model behind an OpenAI-compatible HTTP API."""

    def start(self) -> EndpointInfo:
        """Make the endpoint reachable (idempotent) and describe it."""
        ...

    def stop(self) -> None:
        """Release what `start` acquired (idempotent)."""
        ...

    def api_key(self) -> str | None:
        """The secret to send upstream, read from the environment; None when none is needed."""
        ...


@runtime_checkable
class EpisodeScripted(Protocol):
    """An endpoint whose answers depend on the task of the episode a call belongs to (the
    demonstrator `gold`). The agent solver tells it each episode's reference before the harness
    runs; the recording proxy names the episode of each call it forwards (header
    `X-Orchard-Episode`) because `wants_episode` is true."""

    wants_episode: bool

    def begin_episode(self, episode_id: str, reference: Mapping[str, Any], tools: Any = None) -> None:
        """Calls of `episode_id` are answered from `reference` (a task's `Gold` as data: the family's
        `gold` reference, or the kind the endpoint names in an optional `plays` attribute, e.g.
        `near_miss` for the near-miss demonstrator)."""
        ...

    def end_episode(self, episode_id: str) -> Any:
        """The episode is over: forget it and say how it went."""
        ...


def normalize_base_url(url: str) -> str:
    """`http://h:p` -> `http://h:p/v1`; a URL with a path is kept as given (minus a trailing /)."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"not an http(s) URL: {url!r}", hint="use e.g. http://127.0.0.1:8000/v1")
    url = url.rstrip("/")
    if parts.path in ("", "/"):
        url += "/v1"
    return url


def safe_url(url: str) -> str:
    """A URL fit to write down: no user info, no query (where keys sometimes travel)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def read_key(key_env: str | None) -> str | None:
    """The value of the variable `key_env` names; a clear error when it is named but unset."""
    if not key_env:
        return None
    value = os.environ.get(key_env)
    if not value:
        raise AuthError(
            f"the environment variable {key_env} (named as the endpoint's key) is not set",
            hint=f"export {key_env}=... before starting orchard",
        )
    return value
