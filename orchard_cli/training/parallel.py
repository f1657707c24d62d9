"""Several processes (torchrun): FSDP2, DDP, or one process, behind one interface.

`orchard train` and `orchard rl`'s learner call the model through a small root module (the loss of
a micro-batch, or its token log-probabilities) and hand it to `Parallel`, which picks the engine
by `--shard` and the number of processes (`WORLD_SIZE`, set by torchrun or accelerate):

- `full` (the default with several processes): torch's FSDP2 (`fully_shard`) on every decoder layer
  (the model's `_no_split_modules`) and on the root (embeddings, final norm, LM head): parameters,
  gradients and optimizer state are sharded, each process holds about 1/N of them; a layer's
  weights are gathered for its forward and backward and freed after (ZeRO-3).
- `grad-op`: the same, but a layer's gathered weights stay from its forward to its backward
  (ZeRO-2-like: less communication, more memory).
- `none`: every process holds the whole model; gradients are averaged by DistributedDataParallel.
- One process: the model as is (there is nothing to shard).

Mixed precision: when the run's precision is bf16, FSDP keeps fp32 sharded master weights, gathers
them as bf16 for compute, and reduces gradients in fp32 (`MixedPrecisionPolicy`); DDP and one
process use bf16 autocast over fp32 weights. Activation checkpointing (`--grad-checkpointing`) is
transformers' own (non-reentrant), which FSDP's hooks see on the recomputation too.

Every process runs the same number of forward passes per optimizer step (FSDP's gathers are
collectives): a process with fewer micro-batches than the others runs extra passes with weight 0.
Gradients reach the optimizer averaged over processes (DDP and FSDP both divide by N); the callers
scale their losses by N so the sum of the processes' shares is the one-process gradient.

Checkpoints (`training.checkpoints`) go through `torch.distributed.checkpoint`, which reshards on
load: a run saved by N processes resumes in M. `full_state` gathers the whole model on rank 0 (on
the CPU) for the final save as Hugging Face safetensors.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal

Shard = Literal["auto", "full", "grad-op", "none"]
SHARD_MODES = ("auto", "full", "grad-op", "none")


@dataclass
class Dist:
    """This process's place among torchrun's processes (1 process: world 1, rank 0)."""

    world: int = 1
    rank: int = 0
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> "Dist":
        return cls(int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0")),
                   int(os.environ.get("LOCAL_RANK", "0")))

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(dist: Dist, timeout_s: float | None = None) -> str:
    """Join the process group (nccl on GPUs, gloo on the CPU) when there are several processes;
    returns this process's device."""
    import torch

    cuda = torch.cuda.is_available()
    if dist.world > 1 and not torch.distributed.is_initialized():
        if cuda:
            torch.cuda.set_device(dist.local_rank)
        kwargs: dict[str, Any] = {}
        if timeout_s is not None:
            from datetime import timedelta

            kwargs["timeout"] = timedelta(seconds=timeout_s)
        torch.distributed.init_process_group("nccl" if cuda else "gloo", **kwargs)
    return f"cuda:{dist.local_rank}" if cuda else "cpu"


def barrier(dist: Dist) -> None:
    if dist.world > 1:
        import torch

        torch.distributed.barrier()


def resolve_shard(mode: str, world: int) -> str:
    """The engine actually used: `none` in one process; `full` for `auto` with several."""
    if mode not in SHARD_MODES:
        raise ValueError(f"unknown shard mode {mode!r}")
    if world <= 1:
        return "none"
    return "full" if mode == "auto" else mode


def causal_lm(model: Any) -> Any:
    """The transformers model inside a PEFT wrapper (or the model itself)."""
    from orchard_cli.training.batches import _causal_lm

    return _causal_lm(model)


def decoder_layers(model: Any) -> list[Any]:
    """The model's repeated blocks (transformers' `_no_split_modules` classes), outermost first."""
    names = set(getattr(causal_lm(model), "_no_split_modules", None) or ())
    found: list[Any] = []
    for module in model.modules():
        if type(module).__name__ in names and not any(module is not f and _inside(module, f) for f in found):
            found.append(module)
    return found


def _inside(module: Any, outer: Any) -> bool:
    return any(module is m for m in outer.modules())


def enable_grad_checkpointing(model: Any) -> None:
    """transformers' activation checkpointing, non-reentrant (works with frozen inputs: LoRA)."""
    lm = causal_lm(model)
    if not getattr(lm, "supports_gradient_checkpointing", False):
        from orchard_cli.errors import UsageError

        raise UsageError(f"{type(lm).__name__} does not support activation checkpointing",
                         hint="train without --grad-checkpointing")
    lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lm.config.use_cache = False


def local(tensor: Any) -> Any:
    """The part of a (possibly sharded) tensor this process holds."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


class Parallel:
    """The root module as this run executes it: sharded (FSDP2), replicated (DDP) or alone.

    `root`: the module whose forward the step calls (it holds the model as a submodule). After
    construction, `module` is what to call and `root`'s parameters are the ones to optimize."""

    def __init__(self, root: Any, model: Any, dist: Dist, *, shard: str = "auto", precision: str = "fp32",
                 device: str = "cpu", frozen: bool = False) -> None:
        import torch

        self.dist, self.device, self.precision = dist, device, precision
        self.mode = resolve_shard(shard, dist.world)
        self.root = root
        root.to(device)
        self.module = root
        if self.mode in ("full", "grad-op"):
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
                if precision == "bf16" else MixedPrecisionPolicy()
            keep = self.mode == "grad-op"
            for layer in decoder_layers(model):
                fully_shard(layer, reshard_after_forward=not keep, mp_policy=mp)
            fully_shard(root, reshard_after_forward=not keep, mp_policy=mp)
        elif dist.world > 1 and not frozen:
            from torch.nn.parallel import DistributedDataParallel

            ids = [dist.local_rank] if device.startswith("cuda") else None
            self.module = DistributedDataParallel(root, device_ids=ids)

    @property
    def sharded(self) -> bool:
        return self.mode in ("full", "grad-op")

    @property
    def autocast_bf16(self) -> bool:
        """bf16 autocast over fp32 weights (DDP, one process); FSDP casts the gathered weights itself."""
        return self.precision == "bf16" and not self.sharded

    def autocast(self) -> Any:
        import torch

        if self.autocast_bf16:
            return torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16)
        return nullcontext()

    def sync(self, last: bool) -> Any:
        """DDP: gradients are averaged on the last micro-batch of a step only. FSDP reduces each
        micro-batch's gradients into the shards (keeping them unsharded would cost their memory)."""
        if isinstance(self.module, _ddp_type()) and not last:
            return self.module.no_sync()
        return nullcontext()

    def passes(self, count: int) -> int:
        """Forward passes each process runs for `count` micro-batches (the same on every process)."""
        return -(-count // self.dist.world) if self.dist.world > 1 else count

    def clip(self, params: list[Any], max_norm: float) -> float:
        """Clip the gradients' global norm (across shards and processes); returns it before clipping."""
        import torch

        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        return float(norm)

    def all_sum(self, *values: float) -> list[float]:
        """Each value summed over the processes (float64)."""
        if self.dist.world <= 1:
            return list(values)
        import torch

        box = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(box)
        return [float(v) for v in box]

    def state_bytes(self, optimizer: Any = None) -> int:
        """Bytes of parameters and optimizer state this process holds (its shards under FSDP)."""
        total = sum(local(p).numel() * p.element_size() for p in self.root.parameters())
        if optimizer is not None:
            for state in optimizer.state.values():
                for value in state.values():
                    if hasattr(value, "numel") and value.dim() > 0:
                        total += local(value).numel() * value.element_size()
        return total

    def full_state(self, trainable_only: bool = False) -> dict[str, Any] | None:
        """The whole model's state dict on rank 0, on the CPU, keyed as `model.state_dict()` of the
        root's child `model` (a collective: every process calls it; others get None). One process:
        the tensors themselves, detached."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if self.sharded:
            state = get_model_state_dict(self.root, options=StateDictOptions(full_state_dict=True,
                                                                              cpu_offload=True))
            if not self.dist.main:
                return None
        else:
            if not self.dist.main:
                return None
            state = {k: v.detach() for k, v in self.root.state_dict().items()}
        # a tied weight (embeddings and LM head) once, under its first name, as save_pretrained does
        names = trainable_names(self.root) if trainable_only else \
            {n for n, _ in self.root.named_parameters()} | {n for n, _ in self.root.named_buffers()}
        prefix = "model."
        return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix) and k in names}


def trainable_names(module: Any) -> set[str]:
    return {n for n, p in module.named_parameters() if p.requires_grad}


def _ddp_type() -> Any:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel
