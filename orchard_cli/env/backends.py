"""Sandbox backends by short name, imported only when chosen."""

from __future__ import annotations

from orchard_cli.registry import Registry

backends: Registry = Registry(
    "backend",
    "orchard.backends",
    {
        "local": "orchard_cli.env.local:LocalBackend",
        "docker": "orchard_cli.env.docker:DockerBackend",
        "kubernetes": "orchard_cli.env.kubernetes:KubernetesBackend",
    },
)


def load_backend(name: str, **options):
    """Instantiate the backend called `name` (unknown names list the valid ones)."""
    return backends.load(name)(**options)
