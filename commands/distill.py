"""`orchard distill SUITE --model MODEL ...` and `orchard distill export FILE --format hf|trl|verl-sft --out DIR`.

Exit codes of `orchard distill`:
  0  the run completed (some episodes may have ended in env/infra errors, up to --max-errors)
  2  bad usage or input (unknown suite, harness or endpoint, a file that holds trajectories without --resume)
  3  more episodes ended in env/infra errors than --max-errors allows (by default: every one did)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from orchard_cli.commands._common import (
    ApiKeyEnvOpt,
    HarnessOpt,
    pick_harness,
    old_option,
    MaxCallsOpt,
    MaxTokensOpt,
    MaxTurnsOpt,
    ModelBaseUrlOpt,
    OldSuiteOpt,
    PriceOpt,
    TimeoutOpt,
    config_of,
    episode_options,
    old_spelling,
    parse_prices,
    default_workers,
    BackendOpt,
    DatasetOpt,
    FamilyOpt,
    FormatOpt,
    GroupsOpt,
    InstancesOpt,
    LimitOpt,
    NoPreflightOpt,
    OutputFormat,
    QuietOpt,
    ImageMapOpt,
    NetworkOpt,
    UserBaseUrlOpt,
    UserKeyEnvOpt,
    UserModelOpt,
    RepoMirrorOpt,
    RepoOpt,
    SampleOpt,
    SampleSeedOpt,
    SliceOpt,
    default_command_group,
    emit_json,
    selection_fields,
    stderr_console,
)
from orchard_cli.commands._progress import busy

app = typer.Typer(
    cls=default_command_group("run", "SUITE --model MODEL [OPTIONS]  |  export FILE --format hf|trl|verl-sft|atif --out DIR"),
    help="Record a teacher model driving a real harness on every task: one graded trajectory per "
         "episode, appended to --out as it finishes. Export them with `orchard distill export`.",
    no_args_is_help=True)


@app.command("run", help=(
    "Record a teacher model driving a real harness on every task of SUITE: one graded trajectory per "
    "episode, appended to --out as it finishes (resumable; its run folder X.run/ beside it). Also: "
    "`orchard distill export FILE --format hf --out DIR`.\n\n"
    "Exit codes: 0 completed; 2 bad usage or input; 3 more episodes ended in env/infra errors than --max-errors."
    "\n\n\b\nExamples:\n"
    "  orchard distill claw-mini --model smollm2 --limit 2 --out runs/claw.jsonl\n"
    "  orchard distill swe-mini --model M --base-url https://host/v1 --harness codex --attempts 2"))
def run(
    suite: Annotated[Optional[str], typer.Argument(metavar="SUITE", help="A registered suite ({suites}) or a data file.")] = None,
    model: Annotated[Optional[list[str]], typer.Option("--model", "--teacher", help="The teacher: the model name sent upstream (repeat for several; --teacher is the same flag).")] = None,
    base_url: ModelBaseUrlOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    harness: HarnessOpt = None,
    attempts: Annotated[int, typer.Option("--attempts", min=1, help="Episodes per task and teacher.")] = 1,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Episodes run in parallel (default: 3 with a teacher served in this process, whose batching decodes them together; else 1).")] = None,
    out: Annotated[Path, typer.Option("--out", dir_okay=False, help="Trajectories file (JSONL, appended); its run folder X.run/ goes beside it.")] = Path("trajectories.jsonl"),
    resume: Annotated[bool, typer.Option("--resume", help="Add the episodes --out lacks; finished ones are skipped.")] = False,
    keep: Annotated[str, typer.Option("--keep", help="all: every episode; resolved: only resolved ones go to --out.")] = "all",
    dataset: DatasetOpt = None,
    family: FamilyOpt = None,
    instances: InstancesOpt = None,
    repo: RepoOpt = None,
    group: GroupsOpt = None,
    limit: LimitOpt = None,
    slice_: SliceOpt = None,
    sample: SampleOpt = None,
    sample_seed: SampleSeedOpt = None,
    repo_mirror: RepoMirrorOpt = None,
    network: NetworkOpt = "none",
    image_map: ImageMapOpt = None,
    user_model: UserModelOpt = None,
    user_base_url: UserBaseUrlOpt = None,
    user_key_env: UserKeyEnvOpt = None,
    backend: BackendOpt = "local",
    timeout: TimeoutOpt = None,
    max_calls: MaxCallsOpt = None,
    max_tokens: MaxTokensOpt = None,
    max_turns: MaxTurnsOpt = None,
    price: PriceOpt = None,
    max_errors: Annotated[Optional[int], typer.Option("--max-errors", min=0, help="Episodes with env/infra errors tolerated before exit 3 (default: all but one).")] = None,
    no_preflight: NoPreflightOpt = False,
    quiet: QuietOpt = False,
    fmt: FormatOpt = OutputFormat.text,
    old_suite: OldSuiteOpt = None,
) -> None:
    from orchard_cli.errors import InfraError, UsageError
    from orchard_cli.preflight import Endpoint, check_endpoints
    from orchard_cli.rollout.distill_run import DistillConfig, plan_distill

    suite = old_spelling("--suite", "the SUITE argument", old_suite, suite)
    teacher = model
    if not suite:
        raise UsageError("name the tasks: orchard distill SUITE (swe-verified, swe-lite, swe-mini, calc, or a data file)")
    if keep not in ("all", "resolved"):
        raise UsageError(f"--keep {keep!r}: use all or resolved")
    workers = default_workers(workers, base_url or "smollm2")
    harness = pick_harness(harness, suite, family)
    config = config_of(
        DistillConfig,
        **selection_fields(suite, family=family, dataset=dataset, instances=instances, repo=repo,
                           limit=limit, slice_=slice_, repo_mirror=repo_mirror, network=network,
                                 image_map=image_map, groups=group, sample=sample, sample_seed=sample_seed),
        teachers=list(teacher or []), base_url=base_url, api_key_env=api_key_env, harness=harness,
        user_model=user_model, user_base_url=user_base_url, user_key_env=user_key_env,
        attempts=attempts, workers=workers, backend=backend, keep=keep,  # type: ignore[arg-type]
        out=str(out.resolve()), prices=parse_prices(price),
        options=episode_options(timeout=timeout, max_calls=max_calls, max_tokens=max_tokens, max_turns=max_turns))
    plan = plan_distill(config, resume=resume)  # every local check first (nothing is written yet)
    checked = check_endpoints(  # then every model endpoint the run uses answers, before anything runs
        [Endpoint("--base-url", base_url or "", t, api_key_env) for t in (teacher or [None])]  # type: ignore[list-item]
        + [Endpoint("--user-base-url", user_base_url or "", user_model, user_key_env)], enabled=not no_preflight)
    console = stderr_console(quiet)
    console.print(f"[bold]orchard distill[/] {suite}: {len(plan.tasks)} task(s) x {attempts} attempt(s) x "
                  f"{len(plan.teachers)} teacher(s) ({', '.join(plan.teachers)}), harness {harness}, "
                  f"{busy(workers, len(plan.pending))}" + (f"; {len(plan.planned) - len(plan.pending)} already finished"
                                           if resume else "") + f"\n  trajectories: {plan.out}",
                  soft_wrap=True, markup=True, highlight=False)
    for line in checked:
        console.print(f"  endpoint {line}", markup=False)
    summary = _execute(plan, console, quiet)
    _render(summary, console, fmt)
    limit_errors = max_errors if max_errors is not None else max(summary.planned - 1, 0)
    if summary.errors > limit_errors:
        raise InfraError(f"{summary.errors} of {summary.planned} episode(s) ended in env/infra errors",
                         hint=f"see {plan.run_dir}/episodes.jsonl and logs/; rerun them with --resume --out {plan.out}")


def _execute(plan, console, quiet: bool = False):  # type: ignore[no-untyped-def]
    from orchard_cli.commands._progress import RunProgress

    with RunProgress("distill", len(plan.pending), console=console, quiet=quiet) as progress:

        def on_episode(record, totals) -> None:  # type: ignore[no-untyped-def]
            error = None
            if record.outcome.category in ("env_error", "infra_error", "timeout"):
                error = str(record.outcome.details.get("error") or "; ".join(record.errors[:1]))
            cost = None if totals.cost_usd is None else f"${totals.cost_usd:.4f} so far"
            who = f" ({record.model})" if len(plan.teachers) > 1 else ""
            progress.done(record.task_id + who, record.attempt, record.outcome.category,
                          resolved=record.outcome.resolved, seconds=record.duration_seconds,
                          calls=len(record.calls), tokens_used=(record.tokens_in or 0) + (record.tokens_out or 0),
                          detail=cost, error=error)

        return plan.execute(on_episode)


def _render(summary, console, fmt: OutputFormat) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    if fmt == OutputFormat.json:
        emit_json(summary.model_dump(mode="json"))
        return
    table = Table(title="distill", title_justify="left")
    for column in ("teacher", "episodes", "resolved", "rate", "errors", "tokens in/out", "cost"):
        table.add_column(column, justify="left" if column == "teacher" else "right")
    for name, s in summary.teachers.items():
        table.add_row(name, str(s.episodes), str(s.resolved), f"{s.resolved_rate:.1%}", str(s.errors),
                      f"{s.tokens_in:,} / {s.tokens_out:,}", "unknown" if s.cost_usd is None else f"${s.cost_usd:.4f}")
    console.print(table)
    cats = ", ".join(f"{k} {v}" for k, v in summary.by_category.items())
    unpriced = [name for name, s in summary.teachers.items() if s.cost_usd is None]
    cost = f"${summary.cost_usd:.4f}" if summary.cost_usd is not None else \
        f"unknown (no --price for {', '.join(unpriced)})" if unpriced else "unknown"
    typer.echo(f"distill: {summary.finished}/{summary.planned} episodes finished (ran {summary.ran}, "
               f"skipped {summary.skipped}); resolved {summary.resolved} ({summary.resolved_rate:.1%}); "
               f"errors {summary.errors}; outcomes: {cats or '-'}; tokens {summary.tokens_in:,} in / "
               f"{summary.tokens_out:,} out; cost {cost}; wall {summary.wall_seconds:.1f} s")
    typer.echo(f"trajectories: {summary.out} ({summary.written} written this run)")


@app.command("export")
def export(
    file: Annotated[Path, typer.Argument(metavar="FILE", dir_okay=False, help="A trajectories file written by `orchard distill`.")],
    out: Annotated[Path, typer.Option("--out", file_okay=False, help="Dataset folder to create.")],
    format_: Annotated[str, typer.Option("--format", help="hf (Parquet, the published Orchard layout), trl (TRL's SFTTrainer: orchard's samples pre-tokenized with their assistant mask), verl-sft (verl's multi-turn SFT Parquet), atif (Harbor's ATIF-v1.4 trajectories, one JSON per episode). docs/training.md.")] = "hf",
    keep: Annotated[Optional[str], typer.Option("--keep", help="all, or resolved: only resolved episodes (default: hf all; trl and verl-sft resolved, as orchard train).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="trl, verl-sft: the model the samples are made for (smollm2, a checkpoint folder, a hub id): its tokenizer and chat template.")] = None,
    builder: Annotated[Optional[str], typer.Option("--builder", help="trl, verl-sft: per-call or merged, as orchard train (default: trl per-call, verl-sft merged).")] = None,
    max_seq_len: Annotated[int, typer.Option("--max-seq-len", min=16, help="trl, verl-sft: longest sample in tokens, as orchard train.")] = 2048,
    token_ids: Annotated[str, typer.Option("--token-ids", help="trl: auto (recorded token ids when they are the model's) or never.")] = "auto",
    json_: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    base_model: old_option("--base-model", "--model") = None,
) -> None:
    """Write trajectories as a dataset: hf (tools, messages, metadata), trl, verl-sft or atif.

    \b
    Example:
      orchard distill export runs/claw.jsonl --format hf --out datasets/claw
      orchard distill export runs/claw.jsonl --format trl --model smollm2 --out datasets/claw-trl
    """
    from orchard_cli.errors import UsageError

    model = old_spelling("--base-model", "--model", base_model, model)
    from orchard_cli.export import ExportOptions, export as run_export, names

    if format_ not in names():
        raise UsageError(f"--format {format_!r}: use {', '.join(names())}")
    if keep not in (None, "all", "resolved"):
        raise UsageError(f"--keep {keep!r}: use all or resolved")
    if builder not in (None, "per-call", "merged"):
        raise UsageError(f"--builder {builder!r}: use per-call or merged")
    if token_ids not in ("auto", "never"):
        raise UsageError(f"--token-ids {token_ids!r}: use auto or never")
    if format_ in ("hf", "atif") and (model or builder):
        raise UsageError(f"--model and --builder shape the training formats (trl, verl-sft), not {format_}")
    options = ExportOptions(keep=keep, base_model=model, builder=builder, max_seq_len=max_seq_len,  # type: ignore[arg-type]
                            token_ids=token_ids)  # type: ignore[arg-type]
    result = run_export(format_, file, out, options)
    if json_:
        emit_json(result.model_dump(mode="json"))
        return
    stats = ", ".join(f"{k} {v}" for k, v in result.by_status.items())
    unread = ""
    if result.unreadable:
        lines = ", ".join(str(n) for n in result.unreadable[:5]) + (", ..." if len(result.unreadable) > 5 else "")
        unread += f"; {len(result.unreadable)} unreadable line(s) left out (line {lines})"
    if result.torn_tail:
        unread += "; a torn last line left out"
    what = "trajectories" if result.samples is None else \
        f"samples ({result.samples['trainable_tokens']} trained tokens of {result.samples['tokens']}) from episodes"
    stderr_console().print(f"exported {result.rows} {what} ({stats}); {result.skipped} left out{unread}",
                           soft_wrap=True, highlight=False)
    for path in result.files:
        typer.echo(path)
