"""Harness adapters, looked up by short name and imported only when chosen.

    harness = load_harness("codex")
    problems = harness.check()          # [] when ready, else lines naming the install command
    spec = SandboxSpec(..., network="proxy", proxy_url=episode.base_url, mounts=harness.mounts())
    run = harness.run(sandbox, HarnessContext(prompt=..., model=..., base_url=..., api_key=...))

Third-party harnesses register through the `orchard.harnesses` entry-point group.
"""

from __future__ import annotations

from typing import Any

from orchard_cli.registry import Registry

harnesses: Registry[Any] = Registry("harness", "orchard.harnesses", {
    "bash": "orchard_cli.harnesses.bash_agent:BashAgent",
    "chat": "orchard_cli.harnesses.chat:ChatHarness",
    "codex": "orchard_cli.harnesses.codex:Codex",
    "openclaw": "orchard_cli.harnesses.openclaw:OpenClaw",
    "zeroclaw": "orchard_cli.harnesses.zeroclaw:ZeroClaw",
    "web": "orchard_cli.harnesses.web_agent:WebAgent",
})


def load_harness(name: str, **options: Any) -> Any:
    """A harness instance by name; `options` go to its constructor. Unknown names list the valid ones."""
    return harnesses.load(name)(**options)
