"""The head's pairwise objective: learn from contrasts inside a task, then calibrate.

A value model is used to pick one of a task's N attempts, so what it must get right is the order
of the attempts of one task. Fitted pointwise (resolved or not, every episode on its own), a
logistic head spends its few examples on what tells tasks apart (some code bases read as more
natural than others, some problems are easy). Fitted on pairs (a resolved and an unresolved
episode of the same task: P(a ranks above b) = sigmoid(w . (z_a - z_b)), as in RankNet), every
example is a within-task contrast and whatever is constant across a task cancels out.

The pair weights only order episodes. One scale and one bias on top, fitted pointwise on the
training episodes (Platt scaling, class-balanced), turn the order into a probability of
resolving, so AUC, ECE and the reliability plot keep their meaning.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np


def contrast_pairs(labels: Sequence[int], groups: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(winner index, loser index) for every resolved/unresolved pair within one group."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        by_group[g].append(i)
    wins, losses = [], []
    for members in by_group.values():
        pos = [i for i in members if labels[i] == 1]
        neg = [i for i in members if labels[i] != 1]
        for a in pos:
            for b in neg:
                wins.append(a)
                losses.append(b)
    return np.asarray(wins, dtype=np.int64), np.asarray(losses, dtype=np.int64)


def lbfgs(params: list[Any], loss_fn: Any, steps: int) -> None:
    """Minimise `loss_fn()` over `params` with L-BFGS (strong Wolfe line search): every head fit."""
    import torch

    optimizer = torch.optim.LBFGS(params, max_iter=steps, tolerance_grad=1e-9, tolerance_change=1e-12,
                                  history_size=20, line_search_fn="strong_wolfe")

    def closure() -> Any:
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    optimizer.step(closure)


def pairwise_weights(z: np.ndarray, labels: Sequence[int], groups: Sequence[str], *, l2: float,
                     steps: int, mask: np.ndarray, init: np.ndarray | None = None) -> np.ndarray | None:
    """Weights (zero outside `mask`) fitted on within-group contrasts; None when no group holds
    both outcomes (nothing to contrast: the caller fits pointwise instead). Each pair weighs one;
    the L2 penalty is on the weights, as in the pointwise fit."""
    import torch

    wins, losses = contrast_pairs(labels, groups)
    if not len(wins):
        return None
    diff = torch.tensor(z[wins] - z[losses], dtype=torch.float64)
    keep = torch.tensor(mask, dtype=torch.float64)
    weight = torch.zeros(z.shape[1], dtype=torch.float64, requires_grad=True)
    if init is not None and init.shape[0] == z.shape[1]:
        with torch.no_grad():
            weight.copy_(torch.tensor(init, dtype=torch.float64) * keep)

    def loss() -> Any:
        w = weight * keep
        return torch.nn.functional.softplus(-(diff @ w)).sum() + 0.5 * l2 * (w ** 2).sum()

    lbfgs([weight], loss, steps)
    return (weight.detach() * keep).numpy()


def calibrate(scores: np.ndarray, labels: Sequence[int], weights: Sequence[float], steps: int) -> tuple[float, float]:
    """(scale, bias) of sigmoid(scale * score + bias), fitted on weighted labels; the scale is
    kept non-negative so calibration never reverses the learnt order. Platt's smoothed targets
    ((N+ + 1) / (N+ + 2) for a resolved episode, 1 / (N- + 2) for the others) keep the scale
    finite when the training scores separate the classes, as they often do on the episodes the
    weights were fitted on; without them the probabilities come out 0 or 1."""
    import torch

    n_pos = sum(1 for v in labels if v == 1)
    n_neg = len(labels) - n_pos
    hi, lo = (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2)
    s = torch.tensor(scores, dtype=torch.float64)
    y = torch.tensor([hi if v == 1 else lo for v in labels], dtype=torch.float64)
    w = torch.tensor(list(weights), dtype=torch.float64)
    raw_scale = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(1, dtype=torch.float64, requires_grad=True)

    def loss() -> Any:
        logits = torch.nn.functional.softplus(raw_scale) * s + bias
        return (w * torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")).sum()

    lbfgs([raw_scale, bias], loss, steps)
    return float(torch.nn.functional.softplus(raw_scale.detach())[0]), float(bias.detach()[0])
