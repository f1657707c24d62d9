"""The training loop: plain PyTorch, fp32 master weights, bf16 autocast where the hardware has it.

One optimizer step = `grad_accum` micro-batches of `batch_size` rows (see `batches`); AdamW, a
linear warm-up over `warmup_ratio` of the steps then a cosine decay to 0, gradient clipping at
`max_grad_norm`. Every `save_every` steps a resumable checkpoint goes to DIR/checkpoints/step-N
(trainable weights, optimizer state, RNG state; only the latest is kept); `resume_from` continues
from one at the step after it, with the same data order (the plan is a pure function of the seed).

Precision `auto`: bf16 autocast on a CUDA device that supports bf16, and on a CPU with AVX512-BF16
or AMX (measured on SmolLM2 here: see bench/train_bench.py); fp32 otherwise.

Several processes (`torchrun` / `accelerate launch`, which set WORLD_SIZE, RANK and LOCAL_RANK):
each takes every WORLD_SIZE-th micro-batch of a step, gradients are summed across processes by
DistributedDataParallel, and only rank 0 writes logs, checkpoints and the model.
"""

from __future__ import annotations

import math
import os
import resource
import shutil
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchard_cli.training.batches import Step, collate, fast_head, loss_sum
from orchard_cli.training.config import TrainConfig
from orchard_cli.training.samples import Sample


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(precision: str, device: str) -> str:
    if precision != "auto":
        return precision
    if device.startswith("cuda"):
        import torch

        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_bf16() else "fp32"


def default_threads() -> int | None:
    """1 on machines with at most 2 cores (measured here under load from other processes: a 256-token
    SmolLM2 step took 10-20 s on 1 thread and 55-140 s on 2); otherwise torch's own choice."""
    return 1 if (os.cpu_count() or 1) <= 2 else None


def lr_at(step: int, total: int, peak: float, warmup_ratio: float) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warm-up, then cosine to 0."""
    warmup = int(math.ceil(total * warmup_ratio)) if total > 1 else 0
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    span = max(1, total - warmup)
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / span))


def apply_lora(model: Any, config: TrainConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ModuleNotFoundError as exc:
        from orchard_cli.errors import MissingDependencyError

        raise MissingDependencyError("--lora needs peft, which is not installed",
                                     hint="pip install 'orchard-cli[train]'") from exc
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def peak_memory_mib(device: str) -> float:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class StepLog:
    step: int
    epoch: int
    loss: float
    lr: float
    grad_norm: float
    tokens: int
    trainable_tokens: int
    seconds: float

    def record(self) -> dict[str, Any]:
        return {"schema_version": 1, "step": self.step, "epoch": self.epoch, "loss": round(self.loss, 6),
                "lr": self.lr, "grad_norm": round(self.grad_norm, 6), "tokens": self.tokens,
                "trainable_tokens": self.trainable_tokens, "seconds": round(self.seconds, 4),
                "tokens_per_s": round(self.tokens / self.seconds, 2) if self.seconds else None}


@dataclass
class Dist:
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


def answer_loss_module(model: Any, fast: bool) -> Any:
    """The model wrapped so that one call returns the loss sum (what DDP must see as forward)."""
    import torch

    class AnswerLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: dict[str, Any]) -> Any:
            return loss_sum(self.model, batch, fast)

    return AnswerLoss()


@dataclass
class Trainer:
    model: Any
    config: TrainConfig
    steps: list[Step]
    out: Path
    pad_id: int
    on_step: Callable[[StepLog], None] | None = None
    dist: Dist = field(default_factory=Dist.from_env)

    def __post_init__(self) -> None:
        import torch

        threads = self.config.threads or default_threads()
        if threads:
            torch.set_num_threads(threads)
        torch.manual_seed(self.config.seed)
        if self.dist.world > 1 and not torch.distributed.is_initialized():
            if torch.cuda.is_available():
                torch.cuda.set_device(self.dist.local_rank)
            torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        self.device = f"cuda:{self.dist.local_rank}" if torch.cuda.is_available() else "cpu"
        self.precision = resolve_precision(self.config.precision, self.device)
        self.model.to(self.device)
        self.fast = fast_head(self.model)
        self.module = answer_loss_module(self.model, self.fast)
        if self.dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.dist.local_rank] if self.device.startswith("cuda") else None
            self.module = DistributedDataParallel(self.module, device_ids=ids)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        decay = [p for p in self.params if p.ndim >= 2]
        no_decay = [p for p in self.params if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.config.peak_lr, betas=(0.9, 0.999), eps=1e-8)
        self.step_times: list[float] = []
        self.logs: list[StepLog] = []

    def _autocast(self) -> Any:
        import torch

        if self.precision == "bf16":
            return torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16)
        return nullcontext()

    def run_step(self, index: int) -> StepLog:
        import torch

        step = self.steps[index]
        started = time.perf_counter()
        lr = lr_at(index, len(self.steps), self.config.peak_lr, self.config.warmup_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        denominator = max(1, step.trainable)
        mine = step.micro_batches[self.dist.rank::self.dist.world]
        idle = not mine
        mine = mine or step.micro_batches[:1]  # a process without work still joins the gradient sum
        total = 0.0
        for i, rows in enumerate(mine):
            batch = collate(rows, self.pad_id, self.device)
            sync = i == len(mine) - 1 or self.dist.world == 1
            ctx = self.module.no_sync() if not sync and self.dist.world > 1 else nullcontext()
            with ctx, self._autocast():
                loss = self.module(batch)
            scaled = loss * (0.0 if idle else self.dist.world / denominator)
            scaled.backward()
            total += 0.0 if idle else float(loss.detach())
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.dist.world > 1:
            summed = torch.tensor([total], device=self.device)
            torch.distributed.all_reduce(summed)
            total = float(summed[0])
        seconds = time.perf_counter() - started
        return StepLog(index + 1, step.epoch, total / denominator, lr, float(norm), step.tokens, step.trainable, seconds)

    # ---- checkpoints ------------------------------------------------------------------------

    def save_checkpoint(self, step: int) -> Path:
        return save_checkpoint(self.model, self.optimizer, self.out / "checkpoints", step)

    def load_checkpoint(self, folder: Path) -> int:
        """Restore weights, optimizer and RNG from a checkpoint; returns its step."""
        return load_checkpoint(self.model, self.optimizer, folder, self.device)

    # ---- the loop ---------------------------------------------------------------------------

    def train(self, start: int = 0) -> list[StepLog]:
        """Run steps `start`..end, calling `on_step` after each; checkpoints on the way."""
        self.model.train()
        for index in range(start, len(self.steps)):
            log = self.run_step(index)
            self.logs.append(log)
            if self.on_step is not None:
                self.on_step(log)
            done = index + 1
            if done % self.config.save_every == 0 and done < len(self.steps):
                if self.dist.main:
                    self.save_checkpoint(done)
                self.barrier()
        return self.logs

    def barrier(self) -> None:
        if self.dist.world > 1:
            import torch

            torch.distributed.barrier()

    def evaluate(self, samples: list[Sample]) -> float | None:
        """Mean answer-token loss over `samples` (no gradient), one sample at a time."""
        import torch

        from orchard_cli.training.batches import Row

        if not samples:
            return None
        self.model.eval()
        total, count = 0.0, 0
        with torch.no_grad(), self._autocast():
            for sample in samples:
                batch = collate([Row([sample])], self.pad_id, self.device)
                total += float(loss_sum(self.model, batch, self.fast))
                count += max(0, sum(1 for x in sample.labels[1:] if x != -100))
        self.model.train()
        return total / count if count else None


def median_tokens_per_s(logs: list[StepLog]) -> float | None:
    rates = [log.tokens / log.seconds for log in logs[1:] or logs if log.seconds > 0]
    return round(statistics.median(rates), 2) if rates else None


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


# ---- checkpoints (also the RL learner's) ------------------------------------------------------

def trainable_state(model: Any) -> dict[str, Any]:
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(model: Any, optimizer: Any, root: Path, step: int, extra: dict[str, Any] | None = None) -> Path:
    """root/step-N: trainable weights, optimizer state, RNG state (and `extra` as JSON), written
    under a temporary name and renamed; older checkpoints in `root` are removed."""
    import json

    import torch
    from safetensors.torch import save_file

    target = root / f"step-{step:06d}"
    partial = root / f".step-{step:06d}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    save_file(trainable_state(model), str(partial / "trainable.safetensors"))
    torch.save(optimizer.state_dict(), partial / "optimizer.pt")
    rng = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, partial / "rng.pt")
    if extra is not None:
        (partial / "state.json").write_text(json.dumps(extra) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    for old in root.glob("step-*"):
        if old != target:
            shutil.rmtree(old, ignore_errors=True)
    return target


def load_checkpoint(model: Any, optimizer: Any, folder: Path, device: str) -> int:
    """Restore weights, optimizer and RNG from a checkpoint folder; returns its step."""
    import torch
    from safetensors.torch import load_file

    weights = load_file(str(folder / "trainable.safetensors"))
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in weights]
    if missing:
        from orchard_cli.errors import UsageError

        raise UsageError(f"checkpoint {folder} does not match the model ({len(missing)} tensors missing)")
    with torch.no_grad():
        for name, tensor in weights.items():
            params[name].copy_(tensor.to(params[name].device))
    optimizer.load_state_dict(torch.load(folder / "optimizer.pt", map_location=device, weights_only=True))
    rng = torch.load(folder / "rng.pt", weights_only=True)
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return int(folder.name.split("-")[1])


def latest_checkpoint(root: Path) -> Path | None:
    found = sorted(root.glob("step-*")) if root.is_dir() else []
    return found[-1] if found else None
