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


@pytest.fixture(scope="module")
def batched(smollm2: Any) -> Iterator[Any]:
    """The session's model with batching on (4 a step, 24 prompt tokens a pass: long prompts join
    over several passes while the others decode); its settings before are restored after."""
    from orchard_cli.models.batching import Limits

    before = smollm2.engine.limits if smollm2.engine is not None else None
    assert smollm2.enable_batching(Limits(max_batch=4, step_tokens=24)) is None
    yield smollm2
    if before is not None:
        smollm2.enable_batching(before)
    else:
        smollm2.disable_batching()
