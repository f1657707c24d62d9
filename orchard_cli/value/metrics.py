"""How good a value model is: ranking (AUC), calibration (ECE, Brier, a reliability plot) and
what it buys when it picks one of N candidates (best-of-N), next to the baselines.

Selection strategies, each given one task's candidates in their original order (a candidate's
text is its patch, or for an episode without one its rendered actions: `Episode.output`):
- first: the first candidate (what a single attempt would have given);
- random: the expected outcome of a uniform pick (the mean of the candidates' outcomes);
- majority: the most common patch (whitespace-normalised); ties go to the earliest;
- shortest: the smallest patch by changed lines, then bytes (a common cheap heuristic);
- value: the highest value-model score; ties go to the earliest;
- oracle: 1 when any candidate resolved (pass@N; no selector can beat it).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

STRATEGIES = ("first", "random", "majority", "shortest", "value", "oracle")
BINS = 10


def auc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """Area under the ROC curve (Mann-Whitney, ties counted half); None without both classes."""
    pos = [s for s, y in zip(scores, labels) if y == 1]
    neg = [s for s, y in zip(scores, labels) if y == 0]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def reliability(probs: Sequence[float], labels: Sequence[int], bins: int = BINS) -> list[dict]:
    """Per equal-width bin of predicted probability: count, mean prediction, observed rate."""
    out = []
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        idx = [i for i, p in enumerate(probs) if low <= p < high or (b == bins - 1 and p == 1.0)]
        if idx:
            out.append({"low": low, "high": high, "count": len(idx),
                        "mean_prob": float(np.mean([probs[i] for i in idx])),
                        "rate": float(np.mean([labels[i] for i in idx]))})
    return out


def ece(probs: Sequence[float], labels: Sequence[int], bins: int = BINS) -> float | None:
    """Expected calibration error: count-weighted mean |observed rate - mean prediction| by bin."""
    if not probs:
        return None
    return sum(b["count"] * abs(b["rate"] - b["mean_prob"]) for b in reliability(probs, labels, bins)) / len(probs)


def brier(probs: Sequence[float], labels: Sequence[int]) -> float | None:
    return float(np.mean([(p - y) ** 2 for p, y in zip(probs, labels)])) if probs else None


def normalise_patch(patch: str) -> str:
    """A patch without its index lines, hunk positions and trailing whitespace (for majority)."""
    lines = [re.sub(r"^(@@ [^@]* @@).*", "@@", l).rstrip() for l in patch.strip().splitlines()
             if not l.startswith("index ")]
    return "\n".join(lines)


def patch_size(patch: str) -> tuple[int, int]:
    changed = sum(1 for l in patch.splitlines() if l[:1] in "+-" and not l.startswith(("+++", "---")))
    return changed, len(patch.encode())


def pick(strategy: str, patches: Sequence[str], scores: Sequence[float] | None = None) -> int:
    """Index of the candidate a strategy selects (first / majority / shortest / value)."""
    if strategy == "first":
        return 0
    if strategy == "majority":
        keys = [normalise_patch(p) for p in patches]
        counts = Counter(keys)
        best = max(counts.values())
        return next(i for i, k in enumerate(keys) if counts[k] == best)
    if strategy == "shortest":
        sizes = [patch_size(p) if p.strip() else (10**9, 10**9) for p in patches]
        return min(range(len(patches)), key=lambda i: (sizes[i], i))
    if strategy == "value":
        if scores is None:
            raise ValueError("the value strategy needs scores")
        top = max(scores)
        return next(i for i, s in enumerate(scores) if s == top)
    raise ValueError(f"unknown strategy {strategy!r}")


def best_of_n(groups: Sequence[tuple[Sequence[str], Sequence[int], Sequence[float]]]) -> dict[str, float]:
    """Mean outcome of each strategy over tasks; each group is (patches, resolved 0/1, scores)."""
    totals = {s: 0.0 for s in STRATEGIES}
    for patches, resolved, scores in groups:
        for strategy in ("first", "majority", "shortest", "value"):
            totals[strategy] += resolved[pick(strategy, patches, scores)]
        totals["random"] += sum(resolved) / len(resolved)
        totals["oracle"] += float(any(resolved))
    n = len(groups)
    return {s: (v / n if n else 0.0) for s, v in totals.items()}


def reliability_png(path: Path, probs: Sequence[float], labels: Sequence[int], title: str) -> bool:
    """Write the reliability diagram (with the histogram of predictions); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return False
    rows = reliability(probs, labels)
    fig, (ax, hist) = plt.subplots(2, 1, figsize=(5, 6), gridspec_kw={"height_ratios": [3, 1]}, sharex=True)
    ax.plot([0, 1], [0, 1], ls="--", color="#98a2b3", lw=1, label="perfect calibration")
    if rows:
        ax.plot([r["mean_prob"] for r in rows], [r["rate"] for r in rows], marker="o", color="#2f9e62",
                label="value model")
    ax.set_ylabel("observed resolved rate")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    hist.hist(list(probs), bins=BINS, range=(0, 1), color="#8b95a7")
    hist.set_xlabel("predicted p(resolved)")
    hist.set_ylabel("candidates")
    hist.set_xlim(0, 1)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
