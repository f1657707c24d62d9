"""The clipped policy-gradient loss, as TRL's GRPOTrainer computes it, and token log-probabilities.

Tensors are flat: one entry per trained (policy) token of the step, in order, with `seq` giving
each token's sequence index. Per token, with ratio = exp(logp - old_logp):

    loss_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) + beta * kl_t
    kl_t   = exp(ref - logp) - (ref - logp) - 1                      (only when beta > 0)

and the step's loss aggregates them as TRL's `loss_type` says:

    dapo     sum(loss_t) / tokens in the step                     (TRL's default)
    bnpo     the same here (one optimizer step per generation batch)
    grpo     mean over sequences of each sequence's mean loss_t
    dr_grpo  sum(loss_t) / (sequences * max_completion_length)

`tests/rl/test_loss.py` pins these against values TRL 1.16.0 computed on the same tensors
(`bench/trl_grpo_reference.py` derives them). Normalizers are passed in, so micro-batches of one
step add up to the same loss as one big batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

LossType = Literal["dapo", "bnpo", "grpo", "dr_grpo"]


@dataclass
class Normalizer:
    """What the step's loss is divided by, counted over the whole step."""

    loss_type: LossType
    tokens: int
    sequences: int
    max_completion_length: int = 0
    seq_tokens: Any = None
    """Per sequence: its number of trained tokens (grpo); a tensor indexed by `seq`."""


def policy_loss(logps: Any, old_logps: Any, advantages: Any, seq: Any, norm: Normalizer, *,
                epsilon_low: float = 0.2, epsilon_high: float = 0.2, beta: float = 0.0,
                ref_logps: Any = None) -> tuple[Any, dict[str, Any]]:
    """The loss of these tokens (their share of the step's loss) and per-token statistics."""
    import torch

    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    kl = None
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs the reference model's log-probabilities")
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl
    if norm.loss_type in ("dapo", "bnpo"):
        loss = per_token.sum() / max(1, norm.tokens)
    elif norm.loss_type == "grpo":
        loss = (per_token / norm.seq_tokens[seq].clamp(min=1)).sum() / max(1, norm.sequences)
    elif norm.loss_type == "dr_grpo":
        loss = per_token.sum() / max(1, norm.sequences * norm.max_completion_length)
    else:
        raise ValueError(f"unknown loss type {norm.loss_type!r}")
    low = (ratio < 1 - epsilon_low) & (advantages < 0)
    high = (ratio > 1 + epsilon_high) & (advantages > 0)
    stats = {"clipped": int((low | high).sum()), "tokens": int(logps.numel()),
             "kl_sum": float(kl.detach().sum()) if kl is not None else 0.0}
    return loss, stats


def token_logps(model: Any, batch: dict[str, Any], fast: bool, temperature: float = 1.0) -> Any:
    """Log-probabilities of the labelled tokens of a packed micro-batch (`training.batches.collate`),
    flat, in order, of logits / `temperature`: only the labelled positions go through the LM head
    when `fast`."""
    import torch

    from orchard_cli.training.batches import answer_logits

    logits, targets = answer_logits(model, batch, fast)
    logits = logits.float() if temperature == 1.0 else logits.float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
