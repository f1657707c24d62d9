"""`orchard train --trajectories FILE... --model MODEL --out DIR`: supervised fine-tuning on
recorded trajectories (loss on the assistant tokens only). DIR becomes a transformers checkpoint.
Under `torchrun --nproc-per-node N -m orchard_cli.main train ...` the model is sharded with FSDP2
(`--shard`); docs/training.md has the launch lines.

Exit codes:
  0  trained (or, with --resume, the run in DIR had already finished)
  2  bad usage or input: an empty or malformed trajectory file, a base model that cannot be found,
     --out holding something else, training tasks shared with --eval-suite (without --allow-overlap)
  3  a missing dependency (torch, transformers, peft) or an infrastructure failure
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import (FormatOpt, OutputFormat, config_of, emit_json, old_option, old_spelling,
                                          stderr_console)


class BuilderOpt(str, Enum):
    per_call = "per-call"
    merged = "merged"


class ShardOpt(str, Enum):
    auto = "auto"
    full = "full"
    grad_op = "grad-op"
    none = "none"


class PrecisionOpt(str, Enum):
    auto = "auto"
    fp32 = "fp32"
    bf16 = "bf16"


def _eval_tasks(suite: str, source: str | None = None) -> tuple[set[str], dict[str, str]]:
    """The eval suite's task ids, and content key -> id (the prompt and fixture: tasks.content)."""
    from orchard_cli.tasks.content import content_key
    from orchard_cli.families import load_suite

    _, tasks = load_suite(suite, dataset=source)
    return {t.task_id for t in tasks}, {content_key(t): t.task_id for t in tasks}


def train(
    trajectories: Annotated[list[Path], typer.Option("--trajectories", "-t", dir_okay=False, help="Trajectory file(s) written by orchard distill/eval (repeat the flag).")],
    out: Annotated[Path, typer.Option("--out", file_okay=False, help="Output folder: new, empty, or this run's (with --resume).")],
    model: Annotated[Optional[str], typer.Option("--model", help="The model to fine-tune: smollm2 (the embedded SmolLM2-135M-Instruct), a checkpoint folder (a vision-language one trains on the trajectories' images: docs/vision.md), or a hub id.")] = None,
    eval_suite: Annotated[Optional[str], typer.Option("--eval-suite", help="Refuse training tasks that are in this suite ({suites}), a folder of task folders or a SWE-bench-format file, by id or by content (prompt and fixture).")] = None,
    eval_source: Annotated[Optional[str], typer.Option("--eval-source", help="The eval suite's data or checkout (claw-eval: the benchmark's folder).")] = None,
    allow_overlap: Annotated[bool, typer.Option("--allow-overlap", help="Train even when tasks overlap --eval-suite (warns loudly).")] = False,
    include_unresolved: Annotated[bool, typer.Option("--include-unresolved", help="Also train on unresolved episodes (default: resolved only).")] = False,
    suite: Annotated[Optional[list[str]], typer.Option("--suite", help="Only episodes of this suite (repeatable): {suites}, or a data file's name.")] = None,
    harness: Annotated[Optional[list[str]], typer.Option("--harness", help="Only episodes of this harness (repeatable): {harnesses}.")] = None,
    recorded_by: Annotated[Optional[list[str]], typer.Option("--recorded-by", metavar="MODEL", help="Only episodes recorded by this model (the teacher of orchard distill; repeatable).")] = None,
    builder: Annotated[BuilderOpt, typer.Option("--builder", help="per-call: one sample per model call; merged: consecutive calls of an episode in one sample.")] = BuilderOpt.per_call,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Passes over the data.")] = 1,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", min=1, help="Stop after this many optimizer steps (overrides --epochs).")] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", min=0.0, max=10.0, help="Peak learning rate (default 2e-5, LoRA 2e-4).")] = None,
    max_seq_len: Annotated[int, typer.Option("--max-seq-len", min=16, help="Longest sample in tokens (longer ones keep their start).")] = 2048,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Rows per micro-batch.")] = 1,
    grad_accum: Annotated[int, typer.Option("--grad-accum", min=1, help="Micro-batches per optimizer step.")] = 1,
    packing: Annotated[bool, typer.Option("--packing/--no-packing", help="Pack several samples into one row of --max-seq-len.")] = True,
    lora: Annotated[bool, typer.Option("--lora", help="Train a LoRA adapter (peft) instead of every weight.")] = False,
    lora_r: Annotated[int, typer.Option("--lora-r", min=1, help="LoRA rank.")] = 16,
    merge: Annotated[bool, typer.Option("--merge", help="With --lora: save the merged whole model.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out from its latest checkpoint.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the data order and initialisation.")] = 0,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help="CPU threads for torch (default: 1 on machines with at most 2 cores, else torch's choice).")] = None,
    precision: Annotated[PrecisionOpt, typer.Option("--precision", help="auto: bf16 autocast where the hardware has it, else fp32.")] = PrecisionOpt.auto,
    shard: Annotated[ShardOpt, typer.Option("--shard", help="Under torchrun: full (FSDP2 shards parameters, gradients and optimizer state; the default with several processes), grad-op (FSDP2, gathered weights kept forward to backward), none (DDP). docs/training.md.")] = ShardOpt.auto,
    grad_checkpointing: Annotated[bool, typer.Option("--grad-checkpointing", help="Recompute activations in the backward pass (less memory, more compute).")] = False,
    save_every: Annotated[int, typer.Option("--save-every", min=1, help="Steps between resumable checkpoints.")] = 100,
    val_fraction: Annotated[float, typer.Option("--val-fraction", min=0.0, max=0.9, help="Share of episodes held out for a validation loss.")] = 0.0,
    token_ids: Annotated[str, typer.Option("--token-ids", help="auto: train on recorded token ids when they are the base model's; never: always render.")] = "auto",
    fmt: FormatOpt = OutputFormat.text,
    base_model: old_option("--base-model", "--model") = None,
    teacher: old_option("--teacher", "--recorded-by", Optional[list[str]]) = None,
) -> None:
    """Fine-tune a model on recorded trajectories (SFT, loss on assistant tokens only).

    \b
    Example:
      orchard train --trajectories runs/claw.jsonl --model smollm2 --out ./student
    """
    from orchard_cli.errors import UsageError

    model = old_spelling("--base-model", "--model", base_model, model)
    recorded_by = old_spelling("--teacher", "--recorded-by", teacher, recorded_by)
    if not model:
        raise UsageError("name the model to fine-tune: --model MODEL (smollm2, a checkpoint folder or a hub id)")
    from orchard_cli.training.config import TrainConfig
    from orchard_cli.training.turns import EpisodeFilter
    from orchard_cli.training.run import train as run_training

    if token_ids not in ("auto", "never"):
        raise UsageError(f"--token-ids must be auto or never, not {token_ids!r}")
    console = stderr_console(quiet=os.environ.get("RANK", "0") != "0")  # under torchrun, rank 0 speaks
    config = config_of(
        TrainConfig,
        trajectories=[str(p) for p in trajectories], base_model=model, out=str(out), builder=builder.value,
        filters=EpisodeFilter(only_resolved=not include_unresolved, suites=suite or [], harnesses=harness or [],
                              teachers=recorded_by or []),
        token_ids=token_ids, epochs=epochs, max_steps=max_steps, lr=lr, max_seq_len=max_seq_len,
        batch_size=batch_size, grad_accum=grad_accum, packing=packing, lora=lora, lora_r=lora_r,
        lora_alpha=2 * lora_r, merge=merge, seed=seed, threads=threads, precision=precision.value,
        shard=shard.value, grad_checkpointing=grad_checkpointing,
        save_every=save_every, val_fraction=val_fraction, eval_suite=eval_suite, allow_overlap=allow_overlap,
        resume=resume)
    if eval_source and not eval_suite:
        from orchard_cli.errors import UsageError

        raise UsageError("--eval-source names the data of --eval-suite: give --eval-suite too")
    eval_ids, eval_contents = _eval_tasks(eval_suite, eval_source) if eval_suite else (None, None)

    def warn(message: str) -> None:
        console.print(f"[bold yellow]warning:[/] {message}")

    summary = run_training(config, eval_task_ids=eval_ids, eval_contents=eval_contents, progress=True, warn=warn)
    if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 reports
        return
    if fmt == OutputFormat.json:
        emit_json(summary.model_dump(mode="json"))
        return
    if summary.status == "already_finished":
        typer.echo(f"{summary.out}: this run had already finished ({summary.steps} steps); nothing to do")
        return
    s = summary.samples
    where = f"{summary.device}, {summary.precision}" + (
        f", {summary.processes} processes, shard {summary.shard}" if summary.processes > 1 else "")
    typer.echo(f"trained {summary.base_model} for {summary.steps} steps in {summary.seconds:.0f} s "
               f"({where}, median {summary.tokens_per_s or 0:,.0f} tok/s)")
    typer.echo(f"data: {summary.data.episodes_used} of {summary.data.episodes_read} episodes, {s['samples']} samples "
               f"({s['builder']}), {s['tokens']} tokens, {s['trainable_tokens']} trained")
    typer.echo(f"loss: {summary.first_loss} -> {summary.final_loss}"
               + (f"; validation {summary.val_loss_before} -> {summary.val_loss_after}"
                  if summary.val_loss_after is not None else ""))
    typer.echo(f"checkpoint: {summary.out}")
