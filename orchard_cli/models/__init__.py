"""Model endpoints, looked up by short name and imported only when chosen.

- `openai`: any OpenAI-compatible endpoint that is already running (vLLM, SGLang, a hosted API);
  its key comes from the environment variable the user names, never from a flag value.
- `scripted`: an in-package loopback server that replays fixed replies (for tests).
- `gold`: the demonstrator teacher: it plays each episode's reference solution as the model's turns
  (it needs orchard's recording proxy in front of it, which names each call's episode).
- `near-miss`: the same, playing each task's near miss (a demonstration that does not resolve).
- `smollm2`: the embedded default model (SmolLM2-135M-Instruct on the CPU), served on loopback.
- `local`: a checkpoint folder (`checkpoint=DIR`, e.g. a fine-tuned student) served the same way.
  A spec that is a path to an existing folder means `local` with that folder.

Third-party packages add endpoints through the `orchard.models` entry-point group.
"""

from __future__ import annotations

import os
from typing import Any

from orchard_cli.models.base import (Dialect, EndpointInfo, EpisodeScripted, ModelEndpoint, normalize_base_url,
                                     read_key)
from orchard_cli.registry import Registry

endpoints: Registry = Registry(
    "model endpoint",
    "orchard.models",
    {
        "openai": "orchard_cli.models.openai_compat:OpenAIEndpoint",
        "scripted": "orchard_cli.models.scripted:ScriptedEndpoint",
        "gold": "orchard_cli.models.gold:GoldEndpoint",
        "near-miss": "orchard_cli.models.gold:NearMissEndpoint",
        "smollm2": "orchard_cli.models.local_server:smollm2",
        "local": "orchard_cli.models.local_server:LocalEndpoint",
    },
)


def load_endpoint(name: str, **options: Any) -> ModelEndpoint:
    """Instantiate the endpoint kind called `name` (unknown names list the valid ones)."""
    return endpoints.load(name)(**options)


def resolve_endpoint(spec: str | ModelEndpoint, **options: Any) -> ModelEndpoint:
    """A URL means an OpenAI-compatible endpoint at that URL, a path to a folder a local checkpoint;
    anything else is a registry name."""
    if not isinstance(spec, str):
        return spec
    if spec.startswith(("http://", "https://")):
        return load_endpoint("openai", base_url=spec, **options)
    if ("/" in spec or spec.startswith(".")) and os.path.isdir(spec):
        return load_endpoint("local", checkpoint=spec, **options)
    return load_endpoint(spec, **options)


__all__ = ["Dialect", "EndpointInfo", "EpisodeScripted", "ModelEndpoint", "endpoints", "load_endpoint",
           "normalize_base_url", "read_key", "resolve_endpoint"]
