"""The learner: rollouts -> packed batches -> clipped policy-gradient updates.

Each trainable rollout's segments become samples whose labels are the policy's tokens only
(`response_mask` 1; prompt and environment tokens carry no loss, as in `orchard train`'s merged
builder), packed into rows with `orchard train`'s packing and fed through the same fast LM-head
path, so the learner processes tokens at `orchard train`'s speed (bench/rl_bench.py). A rollout
with advantage 0 (its group's rewards were all equal) contributes nothing to the policy gradient:
it is skipped unless a KL term needs it, but its tokens still count in the loss's normalizer, as in
TRL.

`updates` passes over the same rollouts (TRL's `num_iterations`, PPO's epochs): the first pass's
log-probabilities are the `old` ones of the ratio (detached), so the first update has ratio 1 and
later ones are clipped. `logprob_gap` reports the largest difference between the learner's
log-probabilities and those the serving endpoint returned during the rollout (at temperature 1; a
server reports untempered ones): with weights synced, it is the noise between two forward passes
(~2e-5 in fp32).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.rl.loss import LossType, Normalizer, policy_loss, token_logps
from orchard_cli.rl.samples import Rollout
from orchard_cli.training.parallel import Shard
from orchard_cli.training.samples import IGNORE, Sample


class LearnerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    epsilon_low: float = Field(0.2, ge=0, lt=1)
    epsilon_high: float = Field(0.2, ge=0)
    beta: float = Field(0.0, ge=0)
    """Weight of the KL term to the starting model (0: no reference model is kept)."""
    loss_type: LossType = "dapo"
    updates: int = Field(1, ge=1)
    """Passes over each step's rollouts (TRL's num_iterations)."""
    max_seq_len: int = Field(2048, ge=16)
    rows_per_micro_batch: int = Field(8, ge=1)
    threads: int | None = Field(None, ge=1)
    shard: Shard = "auto"
    """Under torchrun: full / grad-op (FSDP2) or none (DDP); see `orchard train --shard`."""
    grad_checkpointing: bool = False
    lora: bool = False
    """Train a LoRA adapter (all linear layers) over frozen weights (`--sync lora` pushes it)."""
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.0, ge=0, lt=1)


@dataclass
class UpdateStats:
    loss: float
    grad_norm: float
    clipped: float
    """Share of trained tokens whose ratio was clipped (over every pass)."""
    kl: float | None
    tokens: int
    """Tokens processed per pass (prompts included)."""
    trained_tokens: int
    sequences: int
    logprob_gap: float | None
    seconds: float
    passes: int = 1

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens processed per second over every pass."""
        return self.tokens * self.passes / self.seconds if self.seconds and self.tokens else None


@dataclass
class _Item:
    sample: Sample
    advantage: float
    rollout_logps: list[float]
    seq: int
    kept: int
    """Its trained tokens (labels after the first, which collate never trains on)."""


def items_of(rollouts: list[Rollout], max_len: int) -> tuple[list[_Item], int, int, list[int], int]:
    """Samples of the trainable rollouts; also the step's trained-token count, sequence count,
    per-sequence token counts and the longest response (for the loss's normalizer)."""
    items, seq_tokens, longest = [], [], 0
    for rollout in rollouts:
        if not rollout.trainable:
            continue
        for seg in rollout.segments:
            ids = seg.prompt_ids + seg.response_ids
            labels = [IGNORE] * len(seg.prompt_ids) + [t if m else IGNORE for t, m in zip(seg.response_ids,
                                                                                      seg.response_mask)]
            if len(ids) > max_len:  # keep the beginning, as the model saw it
                ids, labels = ids[:max_len], labels[:max_len]
            kept = sum(1 for x in labels[1:] if x != IGNORE)
            if not kept:
                continue
            logps = [lp for lp, m in zip(seg.rollout_log_probs, seg.response_mask) if m][:kept]
            items.append(_Item(Sample(ids, labels, rollout.episode_id), rollout.advantage, logps, len(seq_tokens),
                               kept))
            seq_tokens.append(kept)
            longest = max(longest, sum(seg.response_mask))
    return items, sum(seq_tokens), len(seq_tokens), seq_tokens, longest


def logps_module(model: Any, fast: bool) -> Any:
    """The model wrapped so that one call returns a micro-batch's token log-probabilities (the root
    module FSDP and DDP see)."""
    import torch

    class TokenLogps(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: dict[str, Any], temperature: float = 1.0) -> Any:
            return token_logps(self.model, batch, fast, temperature)

    return TokenLogps()


class Learner:
    """The policy being trained, its optimizer and (with beta > 0) a frozen reference.

    Several processes (torchrun): each takes every `world`-th micro-batch of a step, and runs as
    many passes as the busiest process (extra ones with weight 0); the model is sharded with FSDP2
    (`shard` full or grad-op, the default) or replicated with DDP (`none`), see
    `training.parallel`. Gradients are averaged over the processes and the loss is scaled by their
    number (its normalizers are the whole step's), so the step is the one-process step."""

    def __init__(self, model: Any, config: LearnerConfig, *, pad_id: int, reference: Any = None,
                 dist: Any = None) -> None:
        import torch

        from orchard_cli.training.batches import fast_head
        from orchard_cli.training.parallel import Dist, Parallel, enable_grad_checkpointing, init_distributed
        from orchard_cli.training.trainer import default_threads

        threads = config.threads or default_threads()
        if threads:
            torch.set_num_threads(threads)
        self.model, self.config, self.pad_id = model, config, pad_id
        self.dist = dist or Dist()
        self.device = init_distributed(self.dist)
        if config.beta > 0 and reference is None:
            raise ValueError("beta > 0 needs a reference model")
        if config.grad_checkpointing:
            enable_grad_checkpointing(model)
        self.model.train()
        self.fast = fast_head(model)
        self.parallel = Parallel(logps_module(model, self.fast), model, self.dist, shard=config.shard,
                                 device=self.device)
        self.module = self.parallel.module
        self.reference: Any = None
        if reference is not None:
            for p in reference.parameters():
                p.requires_grad_(False)
            reference.eval()
            self.reference = Parallel(logps_module(reference, self.fast), reference, self.dist, shard=config.shard,
                                      device=self.device, frozen=True).root
        params = [p for p in self.parallel.root.parameters() if p.requires_grad]
        self.params = params
        self.optimizer = torch.optim.AdamW(
            [{"params": [p for p in params if p.ndim >= 2], "weight_decay": config.weight_decay},
             {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
            lr=config.lr, betas=(0.9, 0.999), eps=1e-8)

    @property
    def root(self) -> Any:
        """The module whose parameters and optimizer state checkpoints hold."""
        return self.parallel.root

    def logps(self, samples: list[Sample], grad: bool = False) -> Any:
        """Log-probabilities of the samples' labelled tokens, flat, in order (one packed pass;
        under FSDP every process calls it)."""
        import torch

        from orchard_cli.training.batches import Row, collate

        batch = collate([Row([s]) for s in samples], self.pad_id, self.device)
        with torch.set_grad_enabled(grad):
            return self.parallel.root(batch)

    def full_state(self, trainable_only: bool = False) -> dict[str, Any] | None:
        """The policy's state dict on rank 0 (gathered from the shards under FSDP; a collective)."""
        return self.parallel.full_state(trainable_only)

    def update(self, rollouts: list[Rollout], *, temperature: float = 1.0,
               max_completion_length: int | None = None) -> UpdateStats:
        """One optimizer step per pass over the rollouts (`config.updates` passes). `temperature`:
        the one the rollouts were sampled at (the policy's log-probabilities are of logits / T, as
        TRL's); `max_completion_length`: dr_grpo's constant (default: the longest response)."""
        import torch

        from orchard_cli.training.batches import collate, pack_rows

        started = time.perf_counter()
        cfg = self.config
        items, trained, sequences, seq_tokens, longest = items_of(rollouts, cfg.max_seq_len)
        temp = temperature if temperature > 0 else 1.0
        norm = Normalizer(cfg.loss_type, tokens=trained, sequences=sequences,
                          max_completion_length=max_completion_length or longest,
                          seq_tokens=torch.tensor(seq_tokens or [1], device=self.device))
        active = [it for it in items if it.advantage != 0.0 or cfg.beta > 0]
        by_sample = {id(it.sample): it for it in active}
        rows = pack_rows([it.sample for it in active], cfg.max_seq_len, True)
        micro = [rows[i:i + cfg.rows_per_micro_batch] for i in range(0, len(rows), cfg.rows_per_micro_batch)]
        tokens = sum(r.length for r in rows)
        olds: list[Any] = [None] * len(micro)
        refs: list[Any] = [None] * len(micro)
        total_loss = clipped = kl_sum = 0.0
        gap: float | None = None
        norm_value = 0.0
        self.model.train()
        world, rank = self.dist.world, self.dist.rank
        mine = list(enumerate(micro))[rank::world]
        # every process runs as many passes as the busiest one (FSDP's gathers are collectives)
        runs = [(i, True) for i, _ in mine] + [(0, False)] * (self.parallel.passes(len(micro)) - len(mine))
        for n in range(cfg.updates):
            if not micro:  # nothing to learn from (every group's rewards were equal): no step at all,
                break      # the same on every process, so that AdamW's state stays the one-process one
            for k, (i, real) in enumerate(runs):
                chunk = micro[i]
                members = [by_sample[id(s)] for r in chunk for s in r.samples]
                batch = collate(chunk, self.pad_id, self.device)
                with self.parallel.sync(k == len(runs) - 1):
                    logps = self.module(batch, temp)
                ref = None
                if cfg.beta > 0 and n == 0:  # the reference's log-probabilities, once
                    with torch.no_grad():
                        ref = self.reference(batch, temp)
                if not real:  # its gradient is 0, but it takes part in the collectives
                    (logps.sum() * 0.0).backward()
                    continue
                if olds[i] is None:
                    olds[i] = logps.detach()
                    refs[i] = ref
                    served = torch.tensor([lp for m in members for lp in m.rollout_logps], device=self.device)
                    if temp == 1.0 and served.numel() == logps.numel():  # servers report untempered ones
                        here = float((logps.detach() - served).abs().max()) if served.numel() else 0.0
                        gap = here if gap is None else max(gap, here)
                adv = torch.tensor([m.advantage for m in members for _ in range(m.kept)], device=self.device)
                seq = torch.tensor([m.seq for m in members for _ in range(m.kept)], device=self.device)
                loss, stats = policy_loss(logps, olds[i], adv, seq, norm, epsilon_low=cfg.epsilon_low,
                                          epsilon_high=cfg.epsilon_high, beta=cfg.beta, ref_logps=refs[i])
                (loss * world).backward()  # gradients are averaged over the processes
                total_loss += float(loss.detach())
                clipped += stats["clipped"]
                kl_sum += stats["kl_sum"]
            norm_value = self.parallel.clip(self.params, cfg.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        passes = cfg.updates
        if not micro and items and temp == 1.0:  # no update, but the sync is still checked
            gap = self._gap_only(items)
        total_loss, clipped, kl_sum = self.parallel.all_sum(total_loss, clipped, kl_sum)
        gap = self._worst(gap)
        active_tokens = sum(it.kept for it in active)
        return UpdateStats(loss=total_loss / passes, grad_norm=norm_value,
                           clipped=clipped / max(1, active_tokens * passes),
                           kl=kl_sum / max(1, active_tokens * passes) if cfg.beta > 0 else None,
                           tokens=tokens, trained_tokens=trained, sequences=sequences, logprob_gap=gap,
                           seconds=time.perf_counter() - started, passes=passes)

    def _gap_only(self, items: list[_Item]) -> float | None:
        """The largest gap between the served and the learner's log-probabilities over every
        trainable sequence (a step without an update: every group's rewards were equal)."""
        import torch

        from orchard_cli.training.batches import collate, pack_rows

        by_sample = {id(it.sample): it for it in items}
        rows = pack_rows([it.sample for it in items], self.config.max_seq_len, True)
        micro = [rows[i:i + self.config.rows_per_micro_batch]
                 for i in range(0, len(rows), self.config.rows_per_micro_batch)]
        mine = micro[self.dist.rank::self.dist.world]
        gap: float | None = None
        with torch.no_grad():
            for k in range(self.parallel.passes(len(micro))):
                chunk = mine[k] if k < len(mine) else micro[0]
                logps = self.parallel.root(collate(chunk, self.pad_id, self.device))
                if k >= len(mine):
                    continue
                served = torch.tensor([lp for r in chunk for s in r.samples for lp in by_sample[id(s)].rollout_logps],
                                      device=self.device)
                if served.numel() == logps.numel() and served.numel():
                    here = float((logps - served).abs().max())
                    gap = here if gap is None else max(gap, here)
        return gap

    def _worst(self, gap: float | None) -> float | None:
        if self.dist.world <= 1:
            return gap
        import torch

        worst = torch.tensor([-1.0 if gap is None else gap], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(worst, op=torch.distributed.ReduceOp.MAX)
        return None if float(worst[0]) < 0 else float(worst[0])
