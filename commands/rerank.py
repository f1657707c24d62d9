"""`orchard rerank train | apply | candidates`: the value model, and best-of-N with it.

Exit codes: 0 done; 2 bad usage or input (no results in a run folder, runs of different suites,
a value model from another base); 3 the base model or a sandbox could not be had.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import (FormatOpt, OutputFormat, emit_json, old_option, old_spelling, stderr_console,
                                          stdout_console)

app = typer.Typer(no_args_is_help=True,
                  help="The value model: distil graded experience into a scorer (train), pick the best "
                       "of N candidate attempts with it (apply), make graded candidate sets (candidates).")

ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", min=1, help="torch threads per worker for the base LM (default: the cores, shared among the workers).")]
WorkersOpt = Annotated[int, typer.Option("--workers", min=1, help="Processes that read episodes, each with its own copy of the base LM.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="Where the base LM reads: auto (a GPU when torch sees one), cpu, cuda or cuda:N.")]
CacheOpt = Annotated[bool, typer.Option("--feature-cache/--no-feature-cache", help="Keep what the base LM read on disk (ORCHARD_HOME/cache/value-features) and reuse it.")]


def _reading(device: str, workers: int, threads: Optional[int], cache: bool):  # type: ignore[no-untyped-def]
    from orchard_cli.value.reading import Reading

    return Reading(device=device, workers=workers, threads=threads, cache=cache)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


@app.command("train")
def train(
    out: Annotated[Path, typer.Option("--out", "-o", file_okay=False, help="Folder for the value model (must be new or empty).")],
    trajectories: Annotated[Optional[list[Path]], typer.Option("--trajectories", dir_okay=False, help="Trajectories JSONL file (repeat for more).")] = None,
    runs: Annotated[Optional[list[Path]], typer.Option("--runs", file_okay=False, help="`orchard eval` run folder (repeat for more).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Frozen LM that reads the episodes: smollm2 (the default) or a checkpoint folder.")] = None,
    init_from: Annotated[Optional[Path], typer.Option("--init-from", file_okay=False, help="Continue an earlier value model: its experience plus the new.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the held-out draw and the fit.")] = 0,
    holdout: Annotated[float, typer.Option("--holdout", min=0.0, max=0.9, help="Fraction of tasks held out for the metrics (by task).")] = 0.3,
    fold: Annotated[Optional[str], typer.Option("--fold", help="K/N: hold out the K-th of N folds of the tasks instead of --holdout (cross-validation).")] = None,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, help="L-BFGS iterations of the head.")] = 200,
    max_input_tokens: Annotated[Optional[int], typer.Option("--max-input-tokens", min=64, help="Token budget of the text the LM reads per episode (default 512).")] = None,
    precision: Annotated[str, typer.Option("--precision", help="How the base LM reads: bf16 (2-3x faster on CPUs with AMX or AVX512-BF16, several times slower without), fp32, or auto (bf16 where the CPU has it).")] = "auto",
    pca: Annotated[int, typer.Option("--pca", min=0, help="Principal components of the hidden states the head reads (0: only the LM's log-probability features).")] = 0,
    l2: Annotated[float, typer.Option("--l2", min=0.0, help="L2 penalty of the head.")] = 0.1,
    neg_ratio: Annotated[float, typer.Option("--neg-ratio", min=0.05, help="Weight of all negatives over all positives (1 = balanced).")] = 1.0,
    objective: Annotated[str, typer.Option("--objective", help="pairwise (learn from resolved/unresolved pairs of one task, then calibrate) or pointwise (plain logistic regression).")] = "pairwise",
    features: Annotated[str, typer.Option("--features", help="compact (gains, sizes, relevance to the problem) or all (adds the absolute log-probabilities).")] = "compact",
    shuffle_labels: Annotated[bool, typer.Option("--shuffle-labels", help="Control: fit on permuted labels; held-out metrics should be at chance.")] = False,
    device: DeviceOpt = "auto",
    workers: WorkersOpt = 1,
    threads: ThreadsOpt = None,
    feature_cache: CacheOpt = True,
    fmt: FormatOpt = OutputFormat.text,
    base_model: old_option("--base-model", "--model") = None,
    max_tokens: old_option("--max-tokens", "--max-input-tokens", Optional[int], min=64) = None,
) -> None:
    """Train a value model on graded episodes; its metrics are measured on held-out tasks.

    \b
    Example:
      orchard rerank train --trajectories runs/distill.jsonl --model smollm2 --out ./value
    """
    from orchard_cli.errors import UsageError
    from orchard_cli.value.model import HeadConfig
    from orchard_cli.value.train import TrainConfig, train_value_model

    model = old_spelling("--base-model", "--model", base_model, model) or "smollm2"
    max_input_tokens = old_spelling("--max-tokens", "--max-input-tokens", max_tokens, max_input_tokens) or 512
    if precision not in ("bf16", "fp32", "auto"):
        raise UsageError(f"--precision {precision!r} is not bf16, fp32 or auto")
    if objective not in ("pairwise", "pointwise"):
        raise UsageError(f"--objective {objective!r} is not pairwise or pointwise")
    if features not in ("compact", "all"):
        raise UsageError(f"--features {features!r} is not compact or all")
    fold_kn = None
    if fold is not None:
        parts = fold.split("/")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts) or not 1 <= int(parts[0]) <= int(parts[1]) or int(parts[1]) < 2:
            raise UsageError(f"--fold {fold!r} is not K/N with 1 <= K <= N and N >= 2 (for example 1/2)")
        fold_kn = (int(parts[0]), int(parts[1]))

    config = TrainConfig(
        trajectories=[str(p) for p in trajectories or []], runs=[str(p) for p in runs or []],
        base_model=model, out=str(out), init_from=str(init_from) if init_from else None, seed=seed,
        holdout=holdout, fold=fold_kn, max_tokens=max_input_tokens, precision=precision, shuffle_labels=shuffle_labels,
        reading=_reading(device, workers, threads, feature_cache),
        head=HeadConfig(pca=pca, l2=l2, neg_ratio=neg_ratio, max_steps=max_steps, objective=objective,
                        features=features))
    console = stderr_console()
    report = train_value_model(config, say=lambda line: console.print(line, markup=False))
    if fmt == OutputFormat.json:
        emit_json(report.model_dump(mode="json"))
        return
    from rich.table import Table

    held = report.heldout
    table = Table(title=f"value model -> {report.out} (held-out: {held.tasks} tasks, {held.examples} candidates)",
                  title_justify="left")
    for column in ("strategy", "all candidates", "non-empty, applying"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for strategy, rate in held.best_of_n.items():
        table.add_row(strategy, _pct(rate), _pct(held.best_of_n_applying.get(strategy)))
    stdout_console().print(table)
    typer.echo(f"held-out AUC {_num(held.auc)}, ECE {_num(held.ece)}, Brier {_num(held.brier)}; "
               f"train AUC {_num(report.train.auc)}; "
               + (f"{report.candidates_per_second:g} candidates/s" if report.candidates_per_second
                  else "every episode's features were already read in this process"))
    typer.echo(f"model card: {Path(report.out) / 'model_card.md'}")


@app.command("apply")
def apply(
    value_model: Annotated[Path, typer.Option("--value-model", file_okay=False, help="A folder written by `orchard rerank train`.")],
    runs: Annotated[list[Path], typer.Option("--runs", file_okay=False, help="`orchard eval` run folder holding candidates (repeat for more).")],
    out: Annotated[Path, typer.Option("--out", "-o", file_okay=False, help="Folder for the scorecard of the picks (must be new or empty).")],
    instances: Annotated[Optional[str], typer.Option("--instances", help="Comma-separated instance ids (default: every task in the runs).")] = None,
    filter_: Annotated[bool, typer.Option("--filter/--no-filter", help="Drop candidates whose patch is empty or did not apply, when others are left.")] = True,
    device: DeviceOpt = "auto",
    workers: WorkersOpt = 1,
    threads: ThreadsOpt = None,
    feature_cache: CacheOpt = True,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Pick one of each task's N candidates with a value model; scorecard side by side with
    first attempt, random pick, most common patch and the oracle (pass@N).

    \b
    Example:
      orchard rerank apply --value-model ./value --runs runs/A --runs runs/B --out ./picks
    """
    from orchard_cli.value.apply import RerankConfig, rerank_runs

    config = RerankConfig(value_model=str(value_model), runs=[str(r) for r in runs], out=str(out),
                          instances=[i.strip() for i in instances.split(",") if i.strip()] if instances else None,
                          filter=filter_, reading=_reading(device, workers, threads, feature_cache))
    console = stderr_console()
    report = rerank_runs(config, say=lambda line: console.print(line, markup=False))
    render_report(report, fmt, out)


def render_report(report, fmt: OutputFormat, out: Path) -> None:  # type: ignore[no-untyped-def]
    from orchard_cli.value.apply import dropped_note, labels

    if fmt == OutputFormat.json:
        emit_json(report.model_dump(mode="json", exclude={"per_task"}))
        return
    for warning in report.warnings:
        stderr_console().print(f"[yellow]warning:[/] {warning}")
    from rich.table import Table

    from orchard_cli.runs import RunFolder

    table = Table(title=f"best of N · {report.suite} · {report.tasks} tasks, {report.candidates} candidates",
                  title_justify="left")
    for column in ("strategy", "resolved", "rate"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for strategy, rate in report.strategies.items():
        table.add_row(labels(report)[strategy], f"{report.resolved[strategy]:g}", _pct(rate))
    stdout_console().print(table)
    if report.filtered_out:  # a rate read without this misleads (random 100% of what was left)
        typer.echo(dropped_note(report))
    typer.echo(f"value model: {_pct(report.strategies['value'])} vs first {_pct(report.strategies['first'])}, "
               f"random {_pct(report.strategies['random'])}, oracle {_pct(report.strategies['oracle'])}; "
               f"{report.candidates_per_second:g} candidates/s")
    typer.echo(f"scorecard: {RunFolder(out).scorecard_html}")


@app.command("candidates")
def candidates(
    suite: Annotated[str, typer.Argument(metavar="SUITE", help="A suite whose tasks have gold patches ({suites}), or a SWE-bench-format file.")],
    out: Annotated[Path, typer.Option("--out", "-o", file_okay=False, help="Folder for the predictions files (candidates-K.jsonl).")],
    instances: Annotated[Optional[str], typer.Option("--instances", help="Comma-separated instance ids.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="At most this many tasks.")] = None,
    dataset: Annotated[Optional[str], typer.Option("--dataset", help="Local SWE-bench-format file instead of the suite's dataset.")] = None,
    near_misses: Annotated[int, typer.Option("--near-misses", min=0, help="Near misses of the gold patch per task.")] = 2,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same candidates and slots.")] = 0,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Candidate patches per task (gold, near misses, partial, unrelated edit, empty) as N
    predictions files, each task's candidates shuffled over the files (seeded). Grade each
    with `orchard eval SUITE --predictions FILE`; kinds.json says which is which.

    \b
    Example:
      orchard rerank candidates swe-mini --out cands   # then: orchard eval swe-mini --predictions cands/candidates-1.jsonl
    """
    from orchard_cli.value.candidates_io import write_candidates

    ids = [i.strip() for i in instances.split(",") if i.strip()] if instances else None
    summary = write_candidates(suite, out, instances=ids, limit=limit, dataset=dataset,
                               near_misses=near_misses, seed=seed,
                               say=lambda line: stderr_console().print(line, markup=False))
    if fmt == OutputFormat.json:
        emit_json(summary)
        return
    typer.echo(f"{summary['tasks']} task(s), {summary['files']} predictions file(s) in {out}: "
               + ", ".join(f"{k} {v}" for k, v in summary["kinds"].items()))
