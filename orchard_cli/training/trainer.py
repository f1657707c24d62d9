"""The training loop: plain PyTorch, fp32 master weights, bf16 autocast where the hardware has it.

One optimizer step = `grad_accum` micro-batches of `batch_size` rows (see `batches`); AdamW, a
linear warm-up over `warmup_ratio` of the steps then a cosine decay to 0, gradient clipping at
`max_grad_norm`. Every `save_every` steps a resumable checkpoint goes to DIR/checkpoints/step-N
(trainable weights, optimizer state, RNG state; only the latest is kept); `resume_from` continues
from one at the step after it, with the same data order (the plan is a pure function of the seed).

Precision `auto`: bf16 autocast on a CUDA device that supports bf16, and on a CPU with AVX512-BF16
or AMX (measured on SmolLM2 here: see bench/train_bench.py); fp32 otherwise.

Several processes (`torchrun` / `accelerate launch`, which set WORLD_SIZE, RANK and LOCAL_RANK):
each takes every WORLD_SIZE-th micro-batch of a step; the model is sharded with FSDP2 (`--shard
full`, the default, or `grad-op`) or replicated with DDP (`--shard none`), see `parallel`; every
process writes its shards of a checkpoint (`checkpoints`, resumable in any number of processes);
rank 0 writes the logs and the model, gathered whole (`full_state`).
"""

from __future__ import annotations

import math
import os
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchard_cli.training.batches import Step, collate, fast_head, loss_sum
from orchard_cli.training.checkpoints import load_checkpoint, save_checkpoint
from orchard_cli.training.config import TrainConfig
from orchard_cli.training.parallel import Dist, Parallel, barrier, enable_grad_checkpointing, init_distributed
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
        self.device = init_distributed(self.dist)
        self.precision = resolve_precision(self.config.precision, self.device)
        if self.config.grad_checkpointing:
            enable_grad_checkpointing(self.model)
        self.fast = fast_head(self.model)
        self.parallel = Parallel(answer_loss_module(self.model, self.fast), self.model, self.dist,
                                 shard=self.config.shard, precision=self.precision, device=self.device)
        self.module = self.parallel.module
        self.params = [p for p in self.parallel.root.parameters() if p.requires_grad]
        decay = [p for p in self.params if p.ndim >= 2]
        no_decay = [p for p in self.params if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.config.peak_lr, betas=(0.9, 0.999), eps=1e-8)
        self.step_times: list[float] = []
        self.logs: list[StepLog] = []

    @property
    def shard(self) -> str:
        """The engine in use: full, grad-op (FSDP2), or none (DDP, or one process)."""
        return self.parallel.mode

    def run_step(self, index: int) -> StepLog:
        step = self.steps[index]
        started = time.perf_counter()
        lr = lr_at(index, len(self.steps), self.config.peak_lr, self.config.warmup_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        denominator = max(1, step.trainable)
        world = self.dist.world
        mine = step.micro_batches[self.dist.rank::world]
        passes = self.parallel.passes(len(step.micro_batches))
        # every process runs as many passes as the busiest one (FSDP's gathers are collectives);
        # the extra ones are a real micro-batch with weight 0
        runs = [(rows, True) for rows in mine] + [(step.micro_batches[0], False)] * (passes - len(mine))
        total = 0.0
        for i, (rows, real) in enumerate(runs):
            batch = collate(rows, self.pad_id, self.device)
            with self.parallel.sync(i == len(runs) - 1), self.parallel.autocast():
                loss = self.module(batch)
            # DDP and FSDP average gradients over processes: times `world`, their sum is the step's
            (loss * (world / denominator if real else 0.0)).backward()
            total += float(loss.detach()) if real else 0.0
        norm = self.parallel.clip(self.params, self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        total = self.parallel.all_sum(total)[0]
        seconds = time.perf_counter() - started
        return StepLog(index + 1, step.epoch, total / denominator, lr, norm, step.tokens, step.trainable, seconds)

    def state_mib(self) -> float:
        """MiB of parameters and optimizer state this process holds (its shards under FSDP)."""
        return round(self.parallel.state_bytes(self.optimizer) / 2**20, 3)

    # ---- checkpoints ------------------------------------------------------------------------

    def save_checkpoint(self, step: int) -> Path:
        """A resumable checkpoint (every process calls it: each writes its shards)."""
        return save_checkpoint(self.parallel.root, self.optimizer, self.out / "checkpoints", step, self.dist)

    def load_checkpoint(self, folder: Path) -> int:
        """Restore weights, optimizer and RNG from a checkpoint of any number of processes; its step."""
        return load_checkpoint(self.parallel.root, self.optimizer, folder, self.dist)

    def full_state(self) -> dict[str, Any] | None:
        """The model's whole state dict on rank 0 (None elsewhere; None in one process, where the
        model itself holds it): a collective under FSDP."""
        return self.parallel.full_state() if self.parallel.sharded else None

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
                self.save_checkpoint(done)
        return self.logs

    def barrier(self) -> None:
        barrier(self.dist)

    def evaluate(self, samples: list[Sample]) -> float | None:
        """Mean answer-token loss over `samples` (no gradient), one sample at a time; every
        process computes it (under FSDP each forward is a collective)."""
        import torch

        from orchard_cli.training.batches import Row

        if not samples:
            return None
        self.model.eval()
        total, count = 0.0, 0
        with torch.no_grad(), self.parallel.autocast():
            for sample in samples:
                batch = collate([Row([sample])], self.pad_id, self.device)
                total += float(self.parallel.root(batch))
                count += max(0, sum(1 for x in sample.labels[1:] if x != -100))
        self.model.train()
        return total / count if count else None


def median_tokens_per_s(logs: list[StepLog]) -> float | None:
    rates = [log.tokens / log.seconds for log in logs[1:] or logs if log.seconds > 0]
    return round(statistics.median(rates), 2) if rates else None


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
