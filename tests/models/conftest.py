"""The embedded model served in-process for the model tests.

`smollm2` (the LocalModel) comes from tests/model_fixtures.py: the session's one SmolLM2 load, shared
with the training and value tests. Tests that use these fixtures are marked `model`.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest


@pytest.fixture(scope="session")
def smollm2_url(smollm2: Any) -> Iterator[str]:
    """Base URL (.../v1) of a LocalEndpoint serving the session's model (no second load)."""
    from orchard_cli.models import load_endpoint

    endpoint = load_endpoint("smollm2", cache=False)
    info = endpoint.start()
    assert endpoint.load() is smollm2
    yield info.base_url
    endpoint.stop()
