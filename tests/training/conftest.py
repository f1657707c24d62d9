"""SmolLM2 for the training tests: the session's converted folder (`smollm2_home`, `smollm2_dir`
in tests/model_fixtures.py, the run's one GGUF read), loaded per test from that folder in about a
second, so every test starts from the untouched base weights.

Tests using these fixtures are marked `model`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture
def fresh_model(smollm2_dir: Path) -> Any:
    """The base weights, loaded anew for this test (training changes them in place)."""
    import torch

    from orchard_cli.training.model_loading import load_base_model

    torch.set_num_threads(1)
    return load_base_model(str(smollm2_dir))


@pytest.fixture
def smollm2_cached(smollm2_home: Path, _orchard_home: Path) -> None:
    """This test's ORCHARD_HOME sees the session's converted SmolLM2, so `smollm2` loads fast."""
    target = _orchard_home / "cache" / "models"
    target.mkdir(parents=True, exist_ok=True)
    for folder in (smollm2_home / "cache" / "models").iterdir():
        (target / folder.name).symlink_to(folder, target_is_directory=True)
