"""What an `orchard rl` run reports: the reward curve (PNG) and summary.json."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchard_cli.rl.config import RLConfig, StepRecord


def plot_curve(history: list[StepRecord], evals: list[dict[str, Any]], path: Path) -> str | None:
    """The mean reward per step (training rollouts) and at each evaluation (held-out), as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    points = [(h.step, h.mean_reward) for h in history if h.mean_reward is not None]
    if points:
        ax.plot(*zip(*points), marker=".", color="#6b8fbf", label="training rollouts (mean reward)")
    held = [(e["step"], e["mean_reward"]) for e in evals if e.get("mean_reward") is not None]
    if held:
        ax.plot(*zip(*held), marker="o", color="#d0703c", label="held-out tasks (mean reward)")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    partial = path.with_name(path.name + ".partial.png")
    fig.savefig(partial)
    plt.close(fig)
    partial.replace(path)
    return str(path)


def summarize(cfg: RLConfig, history: list[StepRecord], evals: list[dict[str, Any]], model: Path,
              curve: str | None) -> dict[str, Any]:
    rates = [h.learner_tokens_per_s for h in history if h.learner_tokens_per_s]
    syncs = sorted(h.sync_seconds for h in history if h.sync_seconds)
    return {"schema_version": 1, "out": cfg.out, "steps": len(history), "model": str(model), "reward_curve": curve,
            "first_mean_reward": history[0].mean_reward if history else None,
            "last_mean_reward": history[-1].mean_reward if history else None,
            "evals": evals, "episodes": sum(h.episodes for h in history),
            "median_learner_tokens_per_s": sorted(rates)[len(rates) // 2] if rates else None,
            "median_sync_seconds": syncs[len(syncs) // 2] if syncs else None}
