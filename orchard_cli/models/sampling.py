"""One generated token (`Step`) and how a token is drawn: what the one-at-a-time loop
(`local_model.LocalModel.steps`) and the batching engine (`batching.Engine`) share, so both give
the same tokens for the same logits and seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Step:
    """One generated token: its id, its log-probability and the `top` alternatives (id, logprob)."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


def sample(torch: Any, logits: Any, temperature: float, top_p: float, generator: Any) -> int:
    """One token drawn on the CPU (its seeded generator lives there, whatever the model's device)."""
    probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < top_p
        sorted_probs = sorted_probs * keep
        choice = torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=generator)
        return int(order[choice])
    return int(torch.multinomial(probs, 1, generator=generator))
