"""The recipe's model stages: train (the student, and the control's), rl (GRPO from the student)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchard_cli.recipe import lines
from orchard_cli.recipe.context import Ctx, fresh
from orchard_cli.recipe.state import StageRecord, digest, file_digest

MODEL_FILES = ("config.json", "model.safetensors", "adapter_model.safetensors", "adapter_config.json")


def model_digest(folder: Path) -> str:
    """Digest of a checkpoint's weights and config (not its logs: the same weights, the same digest)."""
    found = {name: file_digest(folder / name) for name in MODEL_FILES if (folder / name).is_file()}
    found.update({p.name: file_digest(p) for p in sorted(folder.glob("model-*.safetensors"))})
    return digest(found)


def _eval_guard(ctx: Ctx) -> tuple[set[str], dict[str, str]]:
    """The held-out tasks' ids and content keys: what `train --eval-suite` refuses to train on."""
    from orchard_cli.tasks.content import content_key
    from orchard_cli.tasks.registry import load_suite

    _, tasks = load_suite(str(ctx.tasks("heldout")), family=ctx.config.family)
    return {t.task_id for t in tasks}, {content_key(t): t.task_id for t in tasks}


def train(ctx: Ctx, record: StageRecord, continuing: bool, *, trajectories: str, out: Path,
          unresolved: bool = False) -> dict[str, Any]:
    """`orchard train` on `trajectories` into `out` (merged builder: one sample per episode, the
    loss on the model's turns only, rendered as the served model sees them); `unresolved`: the
    unresolved episodes too (`--include-unresolved`: the near-miss control's)."""
    from orchard_cli.training.config import TrainConfig
    from orchard_cli.training.turns import EpisodeFilter
    from orchard_cli.training.run import train as run_training

    config, part = ctx.config, ctx.config.train
    if not continuing:
        fresh(out)
    train_config = TrainConfig(
        trajectories=[trajectories], base_model=config.student, out=str(out), builder="merged",
        max_steps=part.steps, epochs=part.epochs, lr=part.lr, max_seq_len=part.max_seq_len,
        batch_size=part.batch_size, grad_accum=part.grad_accum, packing=part.packing, lora=part.lora, merge=part.lora, seed=part.seed,
        threads=part.threads, precision=part.precision, eval_suite=str(ctx.tasks("heldout")),
        filters=EpisodeFilter(only_resolved=not unresolved), resume=continuing and out.exists())
    ctx.command(record, lines.train(train_config))
    ids, contents = _eval_guard(ctx)
    summary = run_training(train_config, eval_task_ids=ids, eval_contents=contents, progress=ctx.progress,
                           warn=lambda message: ctx.say(f"  warning: {message}"))
    samples = summary.samples
    result = {"steps": summary.steps, "first_loss": summary.first_loss, "final_loss": summary.final_loss,
              "seconds": summary.seconds, "tokens_per_s": summary.tokens_per_s, "device": summary.device,
              "precision": summary.precision, "threads": summary.threads, "lr": summary.lr,
              "episodes": summary.data.episodes_used, "samples": samples.get("samples"),
              "tokens": samples.get("tokens"), "trainable_tokens": samples.get("trainable_tokens"),
              "truncated": samples.get("truncated"), "dropped_too_long": samples.get("dropped_too_long"),
              "format": samples.get("format")}
    ctx.say(f"  trained {summary.steps} steps in {summary.seconds:.0f} s: loss {summary.first_loss} -> "
            f"{summary.final_loss}; {samples.get('samples')} samples, {samples.get('truncated')} truncated")
    return result


def student(ctx: Ctx, record: StageRecord, continuing: bool) -> None:
    out = ctx.folder.path("student")
    record.result = train(ctx, record, continuing, trajectories=str(ctx.folder.path("distill", "demos.jsonl")),
                          out=out)
    record.outputs = model_digest(out)


def control(ctx: Ctx, record: StageRecord, continuing: bool) -> None:
    from orchard_cli.recipe.stages_data import control_data

    out = ctx.folder.path("control", "student")
    data = control_data(ctx, record)
    record.result.update(train(ctx, record, continuing, trajectories=data, out=out))
    record.outputs = model_digest(out)


def near_miss(ctx: Ctx, record: StageRecord, continuing: bool) -> None:
    """The near-miss control: each training task's near miss demonstrated through the same harness,
    then the same training on those demonstrations."""
    from orchard_cli.recipe.stages_data import near_miss_data

    out = ctx.folder.path("near-miss", "student")
    data = near_miss_data(ctx, record, continuing)
    record.result.update(train(ctx, record, continuing, trajectories=data, out=out, unresolved=True))
    record.outputs = model_digest(out)


def rl(ctx: Ctx, record: StageRecord, continuing: bool) -> None:
    """`orchard rl` from the student on the training tasks, with its held-out curve; and, when
    asked, the same run with rewards shuffled across each step's episodes (the control)."""
    from orchard_cli.rl.learner import LearnerConfig
    from orchard_cli.rl.loop import RLConfig, plan_rl
    from orchard_cli.rl.rollouts import Sampling
    from orchard_cli.rollout.agent import EpisodeOptions
    from orchard_cli.tasks.base import TaskSelection

    config, part = ctx.config, ctx.config.rl
    runs = [("run", False)] + ([("control", True)] if part.shuffled_control else [])
    results: dict[str, Any] = {}
    for name, shuffled in runs:
        out = ctx.folder.path("rl", name)
        if not continuing:
            fresh(out)
        rl_config = RLConfig(
            selection=TaskSelection(suite=str(ctx.tasks("train")), family=config.family),
            eval_selection=TaskSelection(suite=str(ctx.tasks("heldout")), family=config.family,
                                         limit=part.eval_limit) if part.eval_every else None,
            model=str(ctx.folder.path("student")), out=str(out), harness=config.harness, steps=part.steps,
            tasks_per_step=part.tasks_per_step, group_size=part.group_size,
            sampling=Sampling(temperature=part.temperature, max_new_tokens=config.eval.max_reply_tokens),
            learner=LearnerConfig(lr=part.lr, max_seq_len=config.train.max_seq_len, threads=config.train.threads),
            eval_every=part.eval_every, eval_attempts=1, workers=config.eval.workers, backend=config.backend,
            seed=part.seed, shuffle_rewards=shuffled,
            options=EpisodeOptions(timeout_seconds=config.eval.timeout, max_turns=config.eval.max_turns),
            resume=continuing and (out / "orchard_rl.json").is_file())
        ctx.command(record, lines.rl(rl_config))
        run = plan_rl(rl_config)
        summary = run.execute(
            lambda step, name=name: ctx.say(f"  rl {name} step {step.step}: mean reward {step.mean_reward}, "
                                            f"rollout {step.rollout_seconds:.0f} s, update {step.update_seconds:.0f} s"),
            lambda row, name=name: ctx.say(f"  rl {name} held-out at step {row['step']}: {row['mean_reward']:.3f}"))
        results[name] = {k: summary.get(k) for k in ("steps", "episodes", "first_mean_reward", "last_mean_reward",
                                                     "evals", "model", "reward_curve", "wall_seconds")}
    record.result = results
    record.outputs = model_digest(ctx.folder.path("rl", "run", "model"))
