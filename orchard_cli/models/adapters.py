"""Weights loaded into a running `orchard serve`, through the APIs vLLM and SGLang serve for RL
trainers (what `orchard rl --base-url ... --sync` calls):

- `POST /v1/load_lora_adapter` {"lora_name", "lora_path", "load_inplace"} (vLLM's API; on with
  `orchard serve --enable-lora`, as vLLM's `--enable-lora` with VLLM_ALLOW_RUNTIME_LORA_UPDATING):
  a peft adapter folder (adapter_config.json + adapter_model.safetensors) merged into a copy of the
  served weights, answered for requests whose `model` is `lora_name`. A name already loaded is
  refused (400) unless `load_inplace` is true; then it is replaced. The copy is swapped in whole:
  a generation that started on the old one finishes on it.
- `POST /v1/unload_lora_adapter` {"lora_name"}.
- `POST /update_weights_from_disk` {"model_path", "weight_version"} (SGLang's API; on with
  `--enable-weight-updates`): the served model's weights replaced in place by a checkpoint folder's
  (same architecture), between generations.

Every answer then names the weights that produced it (`weight_version` on the completion and its
chunks): an adapter's is the request's `weight_version` field (an orchard extension vLLM ignores),
else NAME:N for its Nth load; the base model's is the last update's `weight_version`, else none.

Each adapter is a merged copy of the model (memory: one model per adapter; `--max-loras`, default
2): right for the CPU-sized models orchard serves, where merged weights also decode at full speed.
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

from orchard_cli.errors import NotFoundError, UsageError


class Weights:
    """The base model and the LoRA adapters a server answers for."""

    def __init__(self, base: Any, max_loras: int = 2) -> None:
        self.base, self.max_loras = base, max_loras
        self.adapters: dict[str, Any] = {}
        self.loads: dict[str, int] = {}
        self._lock = threading.Lock()

    def model_for(self, name: Any) -> Any:
        """The model a request names (an adapter's name), else the base model."""
        with self._lock:
            return self.adapters.get(name, self.base) if isinstance(name, str) else self.base

    def listing(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"id": name, "object": "model", "created": 0, "owned_by": "orchard", "root": str(m.source),
                     "parent": self.base.name, "max_model_len": m.context} for name, m in self.adapters.items()]

    def load_lora(self, name: str, path: str, *, inplace: bool = False, version: str | None = None) -> str:
        """Merge the adapter at `path` into a copy of the base weights and serve it as `name`."""
        if not name or name == self.base.name:
            raise UsageError(f"lora_name {name!r}: name the adapter (not the base model's name)")
        folder = Path(path)
        if not (folder / "adapter_config.json").is_file():
            raise NotFoundError(f"lora_path {path}: no adapter_config.json there")
        with self._lock:
            if name in self.adapters and not inplace:
                raise UsageError(f"the LoRA adapter {name!r} has already been loaded (load_inplace: true replaces it)")
            if name not in self.adapters and len(self.adapters) >= self.max_loras:
                raise UsageError(f"{len(self.adapters)} LoRA adapters are loaded, the most this server holds "
                                 f"(--max-loras {self.max_loras}): unload one first")
        merged = _merged(self.base, folder, name)
        with self._lock:
            if name not in self.adapters and len(self.adapters) >= self.max_loras:  # another load came first
                merged.disable_batching()
                raise UsageError(f"{len(self.adapters)} LoRA adapters are loaded, the most this server holds "
                                 f"(--max-loras {self.max_loras}): unload one first")
            self.loads[name] = self.loads.get(name, 0) + 1
            merged.weight_version = version if version is not None else f"{name}:{self.loads[name]}"
            replaced, self.adapters[name] = self.adapters.get(name), merged
        if replaced is not None:
            replaced.disable_batching()  # its running requests finish on it, then its engine ends
        return merged.weight_version

    def unload_lora(self, name: str) -> None:
        with self._lock:
            gone = self.adapters.pop(name, None)
        if gone is None:
            raise NotFoundError(f"no LoRA adapter named {name!r} is loaded")
        gone.disable_batching()

    def update_from_disk(self, path: str, version: str | None = None) -> float:
        """Replace the base model's weights by the checkpoint folder's; returns the seconds it took."""
        from safetensors.torch import load_file

        folder = Path(path)
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise NotFoundError(f"model_path {path}: no .safetensors weights there")
        state: dict[str, Any] = {}
        for file in files:
            state.update(load_file(str(file)))
        return self.base.load_weights_from(state, version if version is not None else str(folder.resolve()))


def _merged(base: Any, folder: Path, name: str) -> Any:
    """A LocalModel serving the base weights with the adapter merged in (a copy; base untouched)."""
    try:
        from peft import PeftModel
    except ModuleNotFoundError as exc:
        from orchard_cli.errors import MissingDependencyError

        raise MissingDependencyError("loading a LoRA adapter needs peft", hint="pip install 'orchard-cli[train]'") from exc
    from orchard_cli.models.local_model import LocalModel

    def copy_base() -> Any:
        return copy.deepcopy(base.model)

    if base.engine is not None:  # a consistent copy: at a token boundary, not during a weight update
        weights = base.engine.between_steps(copy_base, drain=False)
    else:
        with base.lock:
            weights = copy_base()
    try:
        merged = PeftModel.from_pretrained(weights, str(folder)).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise UsageError(f"lora_path {folder}: not an adapter of this model ({str(exc).splitlines()[0][:160]})") from None
    model = LocalModel(name, folder, base.tokenizer, merged.eval(), vision=base.vision)
    model.prefix_cache = base.prefix_cache
    if base.engine is not None:  # the adapter's requests are batched as the base's are
        model.enable_batching(base.engine.limits)
    return model
