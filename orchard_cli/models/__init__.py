"""Model endpoints, looked up by short name and imported only when chosen.

- `openai`: any OpenAI-compatible endpoint that is already running (vLLM, SGLang, a hosted API);
  its key comes from the environment variable the user names, never from a flag value.
- `scripted`: an in-package loopback server that replays fixed replies (for tests).

Third-party packages add endpoints through the `orchard.models` entry-point group; orchard's own
local serving (an embedded small model) registers here too when it lands.
"""

from __future__ import annotations

from typing import Any

from orchard_cli.models.base import Dialect, EndpointInfo, ModelEndpoint, normalize_base_url, read_key
from orchard_cli.registry import Registry

endpoints: Registry = Registry(
    "model endpoint",
    "orchard.models",
    {
        "openai": "orchard_cli.models.openai_compat:OpenAIEndpoint",
        "scripted": "orchard_cli.models.scripted:ScriptedEndpoint",
    },
)


def load_endpoint(name: str, **options: Any) -> ModelEndpoint:
    """Instantiate the endpoint kind called `name` (unknown names list the valid ones)."""
    return endpoints.load(name)(**options)


def resolve_endpoint(spec: str | ModelEndpoint, **options: Any) -> ModelEndpoint:
    """A URL means an OpenAI-compatible endpoint at that URL; anything else is a registry name."""
    if not isinstance(spec, str):
        return spec
    if spec.startswith(("http://", "https://")):
        return load_endpoint("openai", base_url=spec, **options)
    return load_endpoint(spec, **options)


__all__ = ["Dialect", "EndpointInfo", "ModelEndpoint", "endpoints", "load_endpoint",
           "normalize_base_url", "read_key", "resolve_endpoint"]
