"""`orchard recipe claw|web`: the whole loop in one resumable run folder: synthesize training and
held-out tasks, record the teacher's demonstrations in the harness, train the student, evaluate the
base, the student and the teacher on the held-out tasks (optionally a shuffled-demonstration
control, RL from the student), and write one report. Each stage prints the command line it stands
for (docs/recipes.md).

Exit codes: 0 the recipe ran (the report is written); 2 bad configuration (before any stage runs);
3 a missing dependency or an infrastructure failure.
"""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import (BackendOpt, FormatOpt, OutputFormat, config_of, emit_json, old_option,
                                          old_spelling, pick_harness, stderr_console)


class FamilyArg(str, Enum):
    claw = "claw"
    web = "web"


class DeviceOpt(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def recipe(
    family: Annotated[FamilyArg, typer.Argument(help="claw (personal-assistant tasks) or web (browser tasks on the local apps).")],
    out: Annotated[Optional[Path], typer.Option("--out", file_okay=False, help="Run folder (default ./runs/recipe-FAMILY-<timestamp>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out: finished stages are skipped; a changed setting re-runs the stages it reaches.")] = False,
    teacher: Annotated[str, typer.Option("--teacher", help="gold (each task's reference solution played through the harness) or a model name.")] = "gold",
    teacher_base_url: Annotated[Optional[str], typer.Option("--teacher-base-url", help="The teacher's OpenAI-compatible endpoint (not with gold).")] = None,
    teacher_key_env: Annotated[Optional[str], typer.Option("--teacher-key-env", help="Environment variable holding the teacher endpoint's key.")] = None,
    student: Annotated[str, typer.Option("--student", help="The base model the student starts from: smollm2 or a checkpoint folder.")] = "smollm2",
    harness: Annotated[Optional[str], typer.Option("--harness", help="The harness demonstrations are recorded in and the student is evaluated in (default: the family's own: bash for claw, web for web).")] = None,
    n: Annotated[int, typer.Option("--n", min=1, max=1000, help="Training tasks to synthesize.")] = 40,
    seed: Annotated[int, typer.Option("--seed", help="Synthesis seed of the training tasks (task seeds seed*1000+i).")] = 11,
    templates: Annotated[Optional[list[str]], typer.Option("--templates", help="Templates to train on (comma-separated; `orchard tasks synth --family F --list`). Default: all.")] = None,
    exclude_templates: Annotated[Optional[list[str]], typer.Option("--exclude-templates", help="Templates not to train on.")] = None,
    heldout_n: Annotated[int, typer.Option("--heldout-n", min=1, max=1000, help="Held-out tasks of the training templates (unseen seeds).")] = 40,
    heldout_seed: Annotated[int, typer.Option("--heldout-seed", min=0, help="Synthesis seed of the held-out tasks.")] = 12,
    unseen_n: Annotated[int, typer.Option("--unseen-n", min=0, max=1000, help="Held-out tasks of the templates not trained on (0: none).")] = 0,
    unseen_seed: Annotated[int, typer.Option("--unseen-seed", min=0, help="Synthesis seed of those tasks.")] = 13,
    steps: Annotated[Optional[int], typer.Option("--steps", min=1, help="Training steps (default: --epochs passes).")] = None,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Passes over the demonstrations.")] = 2,
    lr: Annotated[float, typer.Option("--lr", min=0.0, help="Peak learning rate of the SFT.")] = 5e-5,
    max_seq_len: Annotated[Optional[int], typer.Option("--max-seq-len", min=64, help="Longest training sample (default: claw 2048, web 5120).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Rows per micro-batch.")] = 1,
    grad_accum: Annotated[int, typer.Option("--grad-accum", min=1, help="Micro-batches per step.")] = 1,
    packing: Annotated[bool, typer.Option("--packing/--no-packing", help="Pack several demonstrations into one row of --max-seq-len (default: one per row).")] = False,
    lora: Annotated[bool, typer.Option("--lora", help="Train a LoRA adapter (merged into the saved student).")] = False,
    train_seed: Annotated[int, typer.Option("--train-seed", min=0, help="Seed of the data order and initialisation.")] = 0,
    precision: Annotated[str, typer.Option("--precision", help="auto, fp32 or bf16.")] = "auto",
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help="Torch threads of the trainer.")] = None,
    attempts: Annotated[int, typer.Option("--attempts", min=1, help="Eval attempts per held-out task (pass@k, pass^k; needs --temperature above 0).")] = 1,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0, max=2.0, help="Eval decoding of the served models (0: greedy).")] = 0.0,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Episodes at once (synthesis checks, distill, eval).")] = 1,
    max_turns: Annotated[int, typer.Option("--max-turns", min=1, help="Harness turn limit per eval episode.")] = 8,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="Seconds one harness run may take.")] = 300.0,
    max_new_tokens: Annotated[Optional[int], typer.Option("--max-new-tokens", min=1, help="Cap on one reply of a served local model (default 192).")] = None,
    control: Annotated[bool, typer.Option("--control", help="Also train and evaluate a control student on demonstrations shuffled between tasks of a template.")] = False,
    near_miss_control: Annotated[bool, typer.Option("--near-miss-control", help="Also train and evaluate a control student on near-miss demonstrations (each task's near miss played through the same harness).")] = False,
    rl: Annotated[bool, typer.Option("--rl", help="Also run RL (GRPO) from the student on the training tasks, then evaluate it.")] = False,
    rl_steps: Annotated[int, typer.Option("--rl-steps", min=1, help="RL steps.")] = 8,
    rl_tasks_per_step: Annotated[int, typer.Option("--rl-tasks-per-step", min=1, help="Tasks per RL step.")] = 2,
    rl_group_size: Annotated[int, typer.Option("--rl-group-size", min=2, help="Attempts per task (the GRPO group).")] = 4,
    rl_temperature: Annotated[float, typer.Option("--rl-temperature", min=0.0, max=2.0, help="Sampling temperature of RL rollouts.")] = 1.0,
    rl_lr: Annotated[float, typer.Option("--rl-lr", min=0.0, help="RL learning rate.")] = 1e-6,
    rl_eval_every: Annotated[int, typer.Option("--rl-eval-every", min=0, help="RL steps between held-out evaluations (the curve; 0: none).")] = 0,
    rl_control: Annotated[bool, typer.Option("--rl-control", help="Also run the same RL with rewards shuffled across each step's episodes.")] = False,
    device: Annotated[DeviceOpt, typer.Option("--device", help="auto (a GPU when torch sees one), cpu or cuda.")] = DeviceOpt.auto,
    backend: BackendOpt = "local",
    fmt: FormatOpt = OutputFormat.text,
    max_reply_tokens: old_option("--max-reply-tokens", "--max-new-tokens", Optional[int], min=1) = None,
) -> None:
    """Synthesize -> distill -> train -> eval (-> rl) in one resumable run folder, with one report.

    \b
    Example:
      orchard recipe claw --templates mail-search --n 12 --out runs/recipe-claw   # docs/recipes.md
      orchard recipe claw --resume --out runs/recipe-claw                        # after a stop
    """
    from orchard_cli.recipe.config import (BUNDLED_SUITE, ControlPart, DistillPart, EvalPart, RecipeConfig,
                                           RLPart, SynthPart, TrainPart)
    from orchard_cli.recipe.run import run_recipe
    from orchard_cli.synthesis import split_names

    name = family.value
    folder = out or Path("runs") / f"recipe-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    config = config_of(
        RecipeConfig, family=name, out=str(folder.resolve()), student=student,
        harness=pick_harness(harness, BUNDLED_SUITE[name], None), device=device.value, backend=backend,
        synth=config_of(SynthPart, n=n, seed=seed, templates=split_names(templates),
                        exclude_templates=split_names(exclude_templates) or [], heldout_n=heldout_n,
                        heldout_seed=heldout_seed, unseen_n=unseen_n, unseen_seed=unseen_seed),
        distill=config_of(DistillPart, teacher=teacher, base_url=teacher_base_url, key_env=teacher_key_env),
        train=config_of(TrainPart, steps=steps, epochs=epochs, lr=lr, max_seq_len=max_seq_len, batch_size=batch_size,
                        grad_accum=grad_accum, packing=packing, lora=lora, seed=train_seed, precision=precision, threads=threads),
        eval=config_of(EvalPart, attempts=attempts, temperature=temperature, workers=workers, max_turns=max_turns,
                       timeout=timeout,
                       max_reply_tokens=old_spelling("--max-reply-tokens", "--max-new-tokens", max_reply_tokens,
                                                     max_new_tokens) or 192),
        control=config_of(ControlPart, shuffled=control, near_miss=near_miss_control),
        rl=config_of(RLPart, enabled=rl, steps=rl_steps, tasks_per_step=rl_tasks_per_step, group_size=rl_group_size,
                     temperature=rl_temperature, lr=rl_lr, eval_every=rl_eval_every, shuffled_control=rl_control))
    console = stderr_console()
    data = run_recipe(config, resume=resume, say=lambda line: console.print(line, markup=False, highlight=False,
                                                                            soft_wrap=True))
    if fmt == OutputFormat.json:
        emit_json(data)
        return
    from orchard_cli.recipe.report import pct

    for key, test in data["tests"].items():
        typer.echo(f"{test['first']} -> {test['second']} on {test['set']}: {pct(test['first_rate'])} -> "
                   f"{pct(test['second_rate'])} over {test['pairs']} attempts (McNemar exact p = {test['p_value']:.2g})")
    typer.echo(f"report: {Path(config.out) / 'report.md'}")
