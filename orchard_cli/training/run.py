"""`train(config)`: trajectories -> samples -> a fine-tuned checkpoint in DIR. The Python API of
`orchard train`; the command only parses options and renders the summary.

Order: check DIR (fresh, or this run with --resume), read and filter episodes, refuse contaminated
data (task ids shared with the evaluation suite) unless allowed, load the base model, build the
samples, plan the steps, train, save. DIR then holds the model (safetensors, config, tokenizer and
chat template, and a vision-language model's processor; an adapter for LoRA without --merge), training_log.jsonl, loss.png, README.md (the
model card) and orchard_train.json (config, statistics, results).
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.records import JsonlWriter, write_json, write_text
from orchard_cli.training.config import STATE_FILE, RunState, TrainConfig, check_out_dir, fingerprint
from orchard_cli.training.turns import Episode, LoadReport, load_episodes, task_ids

LOG_FILE = "training_log.jsonl"


class TrainSummary(BaseModel):
    """The result of a run (stdout with --format json, and orchard_train.json's `result`)."""

    model_config = ConfigDict(extra="forbid")

    out: str
    status: str
    """finished, or already_finished when --resume found nothing left to do."""
    base_model: str
    steps: int
    total_steps: int
    resumed_from: int = 0
    first_loss: float | None = None
    final_loss: float | None = None
    """Mean loss of the last 10% of the steps (at least one)."""
    val_loss_before: float | None = None
    val_loss_after: float | None = None
    tokens_per_s: float | None = None
    seconds: float = 0.0
    peak_memory_mib: float = 0.0
    device: str = "cpu"
    precision: str = "fp32"
    processes: int = 1
    shard: str = "none"
    """The engine: full or grad-op (FSDP2), none (DDP, or one process)."""
    state_mib: float = 0.0
    """MiB of parameters and optimizer state one process held (rank 0's shards under FSDP)."""
    threads: int | None = None
    lr: float = 0.0
    data: LoadReport
    samples: dict[str, Any]
    val_samples: int = 0
    overlap: list[str] = Field(default_factory=list)
    """Task ids shared with --eval-suite (only when --allow-overlap let the run go on)."""
    files: list[str] = Field(default_factory=list)


def overlapping(episodes: list[Episode], eval_ids: set[str] | None,
                eval_contents: dict[str, str] | None = None) -> list[str]:
    """Training task ids shared with the eval suite, by id or by content (`metadata.task_content`,
    the task's prompt and fixture: `tasks.content`); one of another id is named with its twin."""
    found = set(task_ids(episodes) & eval_ids) if eval_ids else set()
    for episode in episodes if eval_contents else ():
        key = episode.trajectory.metadata.get("task_content")
        twin = eval_contents.get(key) if isinstance(key, str) else None
        task_id = episode.trajectory.task_id
        if twin is not None and task_id not in found:
            found.add(task_id if twin == task_id else f"{task_id} (same content as {twin})")
    return sorted(found)


def _split(episodes: list[Episode], fraction: float, seed: int) -> tuple[list[Episode], list[Episode]]:
    if fraction <= 0 or len(episodes) < 2:
        return episodes, []
    order = list(range(len(episodes)))
    random.Random(seed).shuffle(order)
    n_val = min(len(episodes) - 1, max(1, round(len(episodes) * fraction)))
    held = set(order[:n_val])
    return [e for i, e in enumerate(episodes) if i not in held], [e for i, e in enumerate(episodes) if i in held]


def _no_data(report: LoadReport) -> UsageError:
    dropped = ", ".join(f"{k}: {v}" for k, v in report.filtered.items()) or "none"
    hint = "pass --include-unresolved to train on every episode" if report.filtered.get("not_resolved") else \
        "check the files and the --suite/--harness/--recorded-by filters"
    return UsageError(f"no episode to train on: {report.episodes_read} read, dropped {dropped}", hint=hint)


def _final_loss(losses: list[float]) -> float | None:
    if not losses:
        return None
    tail = losses[-max(1, len(losses) // 10):]
    return round(sum(tail) / len(tail), 6)


def _save_model(model: Any, tokenizer: Any, out: Path, config: TrainConfig,
                state: dict[str, Any] | None = None) -> Any:
    """The model and its tokenizer (a vision-language model's processor: tokenizer, image
    processor and chat template) as a checkpoint folder that serves and trains again. `state`: the
    whole model gathered from its shards (FSDP), saved in place of the sharded model's own tensors."""
    if state is not None and config.lora and config.merge:
        model = _unsharded_copy(model, state, config)
        state = None
    if config.lora and config.merge:
        model = model.merge_and_unload()
    model.save_pretrained(out, state_dict=state)
    tokenizer.save_pretrained(out)
    return model


def _unsharded_copy(model: Any, state: dict[str, Any], config: TrainConfig) -> Any:
    """A plain copy of a sharded LoRA model on this process's CPU, holding `state` (to merge)."""
    from orchard_cli.training.model_loading import load_base_model
    from orchard_cli.training.trainer import apply_lora

    fresh = apply_lora(load_base_model(config.base_model).model, config)
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if "lora_" in k]:
        raise RuntimeError(f"gathered state does not fit the model ({len(missing)} missing, {len(unexpected)} unexpected)")
    return fresh


def train(config: TrainConfig, *, eval_task_ids: set[str] | None = None, progress: bool = True,
          warn: Any = None, eval_contents: dict[str, str] | None = None) -> TrainSummary:
    """Run (or resume) the training described by `config`. `warn(message)` gets loud warnings.
    `eval_task_ids` / `eval_contents` (content key -> task id) are the eval suite's tasks: a
    training task among them, by id or by content, is contamination."""
    from orchard_cli.training.batches import plan
    from orchard_cli.training.model_loading import check_base_model, load_base_model
    from orchard_cli.training.report import ProgressLine, model_card, read_log, write_loss_png
    from orchard_cli.training.samples import build_samples
    from orchard_cli.training.trainer import Trainer, apply_lora, median_tokens_per_s, peak_memory_mib
    from orchard_cli.training.vision import sample_encoder

    if config.merge and not config.lora:
        raise UsageError("--merge needs --lora (a full fine-tune is already a whole model)")
    for path in config.trajectories:
        if not Path(path).is_file():
            raise UsageError(f"trajectory file {path} does not exist",
                             hint="write one with `orchard distill --out FILE`")
    out = Path(config.out)
    fp = fingerprint(config)
    state = check_out_dir(config, fp)
    if state is not None and state.status == "finished":
        return TrainSummary.model_validate({**state.result, "status": "already_finished"})
    episodes, report = load_episodes(config.trajectories, config.filters)
    if not episodes:
        raise _no_data(report)
    check_base_model(config.base_model)  # before minutes of loading: a base model that cannot be had
    overlap = overlapping(episodes, eval_task_ids, eval_contents)
    if overlap and not config.allow_overlap:
        shown = ", ".join(overlap[:5]) + (f" and {len(overlap) - 5} more" if len(overlap) > 5 else "")
        raise UsageError(f"{len(overlap)} training task(s) are also in the eval suite {config.eval_suite}: {shown}",
                         hint="drop them from the data, or pass --allow-overlap to train anyway (the eval "
                              "will then be contaminated)")
    if overlap and warn is not None:
        warn(f"CONTAMINATION: {len(overlap)} training task(s) are also in {config.eval_suite}; results of "
             f"evaluating this model on it are not clean ({', '.join(overlap[:5])})")
    train_eps, val_eps = _split(episodes, config.val_fraction, config.seed)
    base = load_base_model(config.base_model)
    encoder = sample_encoder(base)  # the tokenizer's, or a vision-language model's processor's
    samples, stats = build_samples(train_eps, encoder, builder=config.builder,
                                   max_seq_len=config.max_seq_len, token_ids=config.token_ids)
    val_samples, _ = build_samples(val_eps, encoder, builder=config.builder,
                                   max_seq_len=config.max_seq_len, token_ids=config.token_ids)
    if not samples:
        raise UsageError(f"the {len(train_eps)} episode(s) gave no training sample "
                         f"(template mismatches: {stats.template_mismatch}, too long: {stats.dropped_too_long})",
                         hint="raise --max-seq-len")
    steps = plan(samples, epochs=config.epochs, max_steps=config.max_steps, seed=config.seed,
                 max_len=config.max_seq_len, packing=config.packing, batch_size=config.batch_size,
                 grad_accum=config.grad_accum)
    import torch

    torch.manual_seed(config.seed)  # the LoRA initialisation is part of the run
    model = apply_lora(base.model, config) if config.lora else base.model
    trainer = Trainer(model, config, steps, out, pad_id=base.tokenizer.pad_token_id)
    main = trainer.dist.main
    start = 0
    checkpoints = sorted((out / "checkpoints").glob("step-*")) if state is not None else []
    if checkpoints:
        start = trainer.load_checkpoint(checkpoints[-1])
    log_path = out / LOG_FILE
    if main:
        out.mkdir(parents=True, exist_ok=True)
        kept = [r for r in read_log(log_path) if r["step"] <= start] if state is not None else []
        write_text(log_path, "".join(_line(r) for r in kept))
        write_json(out / STATE_FILE, RunState(fingerprint=fp, config=config, step=start, total_steps=len(steps)))
    val_before = trainer.evaluate(val_samples) if start == 0 else None
    bar = ProgressLine(len(steps), start, enabled=progress and main)
    writer = JsonlWriter(log_path) if main else None

    def on_step(log: Any) -> None:
        if writer is not None:
            writer.write(log.record())
        bar.update(log)
        if main and log.step % config.save_every == 0 and log.step < len(steps):
            write_json(out / STATE_FILE, RunState(fingerprint=fp, config=config, step=log.step,
                                                  total_steps=len(steps)))

    trainer.on_step = on_step
    started = time.perf_counter()
    try:
        logs = trainer.train(start)
    finally:
        bar.close()
        if writer is not None:
            writer.close()
    seconds = time.perf_counter() - started
    val_after = trainer.evaluate(val_samples)
    gathered = trainer.full_state()  # every process takes part; rank 0 gets the whole model
    history = read_log(log_path) if main else []
    summary = TrainSummary(
        out=str(out), status="finished", base_model=base.name, steps=len(steps), total_steps=len(steps),
        resumed_from=start, first_loss=history[0]["loss"] if history else None,
        final_loss=_final_loss([r["loss"] for r in history]),
        val_loss_before=_round(val_before), val_loss_after=_round(val_after),
        tokens_per_s=median_tokens_per_s(logs), seconds=round(seconds, 2),
        peak_memory_mib=round(peak_memory_mib(trainer.device), 1), device=trainer.device,
        precision=trainer.precision, processes=trainer.dist.world, shard=trainer.shard,
        state_mib=trainer.state_mib(), threads=_threads(), lr=config.peak_lr, data=report,
        samples=stats.model_dump(), val_samples=len(val_samples), overlap=overlap)
    if main:
        _save_model(model, base.processor or base.tokenizer, out, config, gathered)
        has_png = write_loss_png(history, out / "loss.png")
        write_text(out / "README.md", model_card(summary.model_dump(), config.model_dump(mode="json")))
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        summary.files = sorted(p.name for p in out.iterdir())
        if not has_png and warn is not None:
            warn("matplotlib is not installed: no loss.png (pip install 'orchard-cli[train]')")
        write_json(out / STATE_FILE, RunState(fingerprint=fp, status="finished", config=config, step=len(steps),
                                              total_steps=len(steps), result=summary.model_dump(mode="json")))
    trainer.barrier()
    return summary


def _line(record: dict[str, Any]) -> str:
    import json

    return json.dumps(record, separators=(",", ":")) + "\n"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _threads() -> int:
    import torch

    return torch.get_num_threads()
