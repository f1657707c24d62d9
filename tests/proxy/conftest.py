"""Fixtures: a real scripted upstream on loopback and the real proxy in front of it."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.proxy import ProxyHandle, start_proxy


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedEndpoint]]:
    started: list[ScriptedEndpoint] = []

    def make(replies: list[Any] = (), **options: Any) -> ScriptedEndpoint:
        endpoint = ScriptedEndpoint(list(replies), **options)
        endpoint.start()
        started.append(endpoint)
        return endpoint

    yield make
    for endpoint in started:
        endpoint.stop()


@pytest.fixture
def proxy_for() -> Iterator[Callable[..., ProxyHandle]]:
    started: list[ProxyHandle] = []

    def make(upstream: Any, **options: Any) -> ProxyHandle:
        options.setdefault("retry_backoff_s", 0.01)
        handle = start_proxy(upstream, **options)
        started.append(handle)
        return handle

    yield make
    for handle in started:
        handle.stop()
