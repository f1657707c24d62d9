"""`orchard eval SUITE ...`, `orchard eval compare RUN_A RUN_B` and `orchard eval regrade RUN`.

Exit codes of `orchard eval SUITE`:
  0  the run completed (and met --fail-under, when given)
  1  the run completed below --fail-under
  2  bad usage or input (unknown suite or instance, malformed predictions, a different --resume config)
  3  env/infra errors on more instances than --max-errors (default 0), or nothing graded
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from orchard_cli.commands._common import (
    ApiKeyEnvOpt,
    pick_harness,
    MaxCallsOpt,
    MaxTokensOpt,
    MaxTurnsOpt,
    PriceOpt,
    TimeoutOpt,
    check_priced,
    config_of,
    old_option,
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

EXIT_CODES = ("Exit codes: 0 completed (and met --fail-under); 1 below --fail-under; 2 bad usage or "
              "input; 3 env/infra errors on more instances than --max-errors (so a run where nothing "
              "could be graded never passes in CI).")


RUN_HELP = (
    "Evaluate on SUITE and write a scorecard (also spelled `orchard eval run SUITE`): an agent (a harness "
    "driving a model), or gold, empty or a predictions file.\n\nSUITE: {suites}; or a data file "
    "(.jsonl, .json, .parquet; --family says whose format).\n\nAlso: `orchard eval compare RUN_A RUN_B` "
    "(per-task flips, a paired interval), `orchard eval regrade RUN` (grade a run's stored evidence again).\n\n"
    + EXIT_CODES + "\n\n\b\nExamples:\n"
    "  orchard eval claw-mini --predictions gold                        # every task resolves, no model\n"
    "  orchard eval claw-mini --harness bash --model smollm2 --limit 2  # the embedded model as an agent\n"
    "  orchard eval swe-mini --harness codex --model M --base-url https://host/v1 --attempts 4")

app = typer.Typer(
    cls=default_command_group("run", "SUITE [OPTIONS]  |  compare RUN_A RUN_B  |  regrade RUN"),
    no_args_is_help=True,
    help=RUN_HELP)


def _parse_rate(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip()
    try:
        rate = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= 1.0:
        from orchard_cli.errors import UsageError

        raise UsageError(f"--fail-under {value!r} is not a rate between 0 and 1 (or a percentage like 50%)")
    return rate


def _default_out(suite: str) -> str:
    stem = Path(suite).stem if ("/" in suite or suite.endswith((".json", ".jsonl"))) else suite
    return str(Path("runs") / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', stem)}-{time.strftime('%Y%m%d-%H%M%S')}")


@app.command("run", help=RUN_HELP)
def run(
    suite: Annotated[str, typer.Argument(metavar="SUITE", help="A registered suite ({suites}) or a data file.")],
    predictions: Annotated[Optional[str], typer.Option("--predictions", help="No agent: gold (the family's reference solution), empty (nothing, the floor), or a predictions file (SWE-bench's JSONL/JSON: instance_id, model_patch) for families graded on a patch.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="The model an agent run drives: the name its endpoint serves (smollm2: the embedded model, no --base-url needed).")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="The OpenAI-compatible endpoint of --model (…/v1; its key from OPENAI_API_KEY), asked once before the run; default: the embedded smollm2.")] = None,
    api_key_env: ApiKeyEnvOpt = None,
    harness: Annotated[Optional[str], typer.Option("--harness", help=f"The agent harness that drives --model: {{harnesses}} (default with --model: the one the suite's family is made for: chat for quiz suites like capitals, web for browser tasks, else bash).")] = None,
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
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Instances evaluated in parallel (default: 3 with a model served in this process, whose batching decodes them together; else 1).")] = None,
    attempts: Annotated[int, typer.Option("--attempts", min=1, help="Attempts per instance (pass@k, pass^k).")] = 1,
    out: Annotated[Optional[Path], typer.Option("--out", file_okay=False, help="Run folder (default: ./runs/<suite>-<timestamp>).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out; finished attempts are kept.")] = False,
    fail_under: Annotated[Optional[str], typer.Option("--fail-under", help="Exit 1 when the resolved rate is below this (0.5 or 50%).")] = None,
    max_errors: Annotated[int, typer.Option("--max-errors", min=0, help="Instances with env/infra errors tolerated before exit 3.")] = 0,
    retry_errors: Annotated[Optional[int], typer.Option("--retry-errors", min=0, help="Run an attempt lost to an env/infra error again, up to N times (claw-eval default 2, as its runner; else 0: counted as not passed).")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed passed to the attempt source (recorded).")] = None,
    max_turns: MaxTurnsOpt = None,
    timeout: TimeoutOpt = None,
    max_calls: MaxCallsOpt = None,
    max_tokens: MaxTokensOpt = None,
    price: PriceOpt = None,
    judge_model: Annotated[Optional[str], typer.Option("--judge-model", help="An LLM judge's model: its score is reported beside each verdict, never inside it.")] = None,
    judge_base_url: Annotated[Optional[str], typer.Option("--judge-base-url", help="The judge's OpenAI-compatible endpoint (…/v1).")] = None,
    judge_key_env: Annotated[Optional[str], typer.Option("--judge-key-env", help="Environment variable holding the judge's key (default OPENAI_API_KEY when set).")] = None,
    rerank: Annotated[Optional[Path], typer.Option("--rerank", file_okay=False, help="A value model folder: afterwards, pick the best of each instance's attempts (scorecard in RUN/rerank/).")] = None,
    no_preflight: NoPreflightOpt = False,
    quiet: QuietOpt = False,
    fmt: FormatOpt = OutputFormat.text,
    agent_timeout: old_option("--agent-timeout", "--timeout", Optional[float], min=1) = None,
) -> None:
    from orchard_cli.errors import BelowBarError, InfraError, UsageError
    from orchard_cli.preflight import Endpoint, check_endpoints
    from orchard_cli.rollout.eval_run import EvalConfig, narrow_limit, plan_eval, verdict

    timeout = old_spelling("--agent-timeout", "--timeout", agent_timeout, timeout)
    if model and not predictions and harness is None:
        harness = pick_harness(None, suite, family)
    prices = parse_prices(price)
    check_priced(prices, [model] if model else [])
    if resume and not out:
        raise UsageError("--resume needs --out DIR (the run folder to continue)")
    selection = selection_fields(suite, family=family, dataset=dataset, instances=instances, repo=repo,
                                 limit=limit, slice_=slice_, repo_mirror=repo_mirror, network=network,
                                 image_map=image_map, groups=group, sample=sample, sample_seed=sample_seed)
    rate = _parse_rate(fail_under)
    predictions_arg = predictions
    if predictions and predictions not in ("gold", "empty"):
        predictions_arg = str(Path(predictions).resolve())
    workers = default_workers(workers, (base_url or "smollm2") if model and not predictions else None)
    config = config_of(
        EvalConfig, **selection, backend=backend, attempts=attempts, predictions=predictions_arg, model=model, base_url=base_url,
        harness=harness, seed=seed, max_turns=max_turns, timeout=timeout, max_calls=max_calls, max_tokens=max_tokens,
        prices=prices, api_key_env=api_key_env, workers=workers, fail_under=rate, max_errors=max_errors,
        retry_errors=retry_errors,
        judge_model=judge_model, judge_base_url=judge_base_url, judge_key_env=judge_key_env,
        user_model=user_model, user_base_url=user_base_url, user_key_env=user_key_env,
        out=str(Path(out or _default_out(suite)).resolve()))
    if rerank is not None:  # a bad value model fails now, not after the run
        from orchard_cli.value.model import ValueModel

        ValueModel.load(rerank)
    plan = plan_eval(config, resume=resume)  # every local check first (nothing is written yet)
    checked = check_endpoints([  # then every model endpoint the run uses answers, before anything runs
        Endpoint("--base-url", base_url or "", model, api_key_env),
        Endpoint("--judge-base-url", judge_base_url or "", judge_model, judge_key_env),
        Endpoint("--user-base-url", user_base_url or "", user_model, user_key_env)], enabled=not no_preflight)
    console = stderr_console(quiet)
    skipped = len(plan.tasks) * attempts - len(plan.pending)
    console.print(f"[bold]orchard eval[/] {suite}: {len(plan.tasks)} instance(s) x {attempts} attempt(s), "
                  f"source {plan.solver.name}, backend {backend}, {busy(workers, len(plan.pending))}"
                  + (f"; {skipped} already finished" if skipped else "") + f"\n  run folder: {plan.out}",
                  soft_wrap=True)
    for line in checked:
        console.print(f"  endpoint {line}", markup=False, soft_wrap=True)
    note = narrow_limit(plan)
    if note:
        console.print(f"  {note}", markup=False)
    card = _execute(plan, console, quiet)
    if rerank is None:
        _render(card, plan, console, fmt)
    else:  # the value model picks one attempt per instance: RUN/rerank/ holds its scorecard
        from orchard_cli.commands.rerank import render_report
        from orchard_cli.value.apply import RerankConfig, rerank_runs

        picked = rerank_runs(RerankConfig(value_model=str(rerank), runs=[str(plan.out)], out=str(plan.out / "rerank")),
                             say=lambda line: console.print(line, markup=False))
        if fmt == OutputFormat.json:
            emit_json({**card.model_dump(mode="json"), "rerank": picked.model_dump(mode="json", exclude={"per_task"})})
        else:
            _render(card, plan, console, fmt)
            render_report(picked, fmt, plan.out / "rerank")
    code, reason = verdict(card, fail_under=rate, max_errors=max_errors)
    if code == 3:
        raise InfraError(reason or "env/infra errors",
                         hint=f"see {plan.folder.results} and logs/; retry them with --resume --out {plan.out}")
    if code == 1:
        raise BelowBarError(reason or "below --fail-under")


def _execute(plan, console, quiet: bool = False):  # type: ignore[no-untyped-def]
    from orchard_cli.commands._progress import RunProgress

    try:
        with RunProgress("eval", len(plan.pending), console=console, quiet=quiet) as progress:

            def on_result(result) -> None:  # type: ignore[no-untyped-def]
                spent = (result.tokens_in or 0) + (result.tokens_out or 0)
                progress.done(result.instance_id, result.attempt, result.category, resolved=result.resolved,
                              seconds=result.duration_seconds, tokens_used=spent, error=result.error)

            return plan.execute(on_result)
    except KeyboardInterrupt:  # the partial scorecard is on disk: say what it holds, then stop
        _say_interrupted(plan, console)
        raise


def _say_interrupted(plan, console) -> None:  # type: ignore[no-untyped-def]
    import json

    from orchard_cli.scoring.scorecard import Scorecard

    try:
        card = Scorecard.model_validate(json.loads(plan.folder.scorecard.read_text()))
    except (OSError, ValueError):
        return
    console.print(_summary_line(card), markup=False, soft_wrap=True)
    console.print(f"resume with: orchard eval ... --resume --out {plan.out}", markup=False, soft_wrap=True)


def _render(card, plan, console, fmt: OutputFormat) -> None:  # type: ignore[no-untyped-def]
    """The scorecard for people (a table by the family's main grouping) or for scripts (JSON)."""
    from rich.table import Table

    from orchard_cli.scoring.report import benchmark_lead, main_grouping, pct, strict_beside

    if fmt == OutputFormat.json:
        emit_json(card.model_dump(mode="json"))
        return
    lead = benchmark_lead(card)
    if lead:  # the benchmark's leaderboard metric first (Claw-Eval: Pass^3), orchard's verdict beside it
        console.print(f"[bold]{lead}[/]", soft_wrap=True, highlight=False)
        console.print(strict_beside(card), soft_wrap=True, highlight=False)
    title, groups = main_grouping(card)
    table = Table(title=f"{card.suite} · {card.source}", title_justify="left")
    for column in (title, "resolved", "total", "errors", "rate"):
        table.add_column(column, justify="left" if column == title else "right")
    for name, s in groups.items():
        table.add_row(name, str(s.resolved), str(s.total), str(s.errors), pct(s.resolved_rate))
    table.add_section()
    table.add_row("[bold]all[/]", f"[bold]{card.resolved}[/]", str(card.total), str(card.errors),
                  f"[bold]{pct(card.resolved_rate)}[/]")
    console.print(table)
    cats = ", ".join(f"{k} {v}" for k, v in card.by_category.items() if v)
    console.print(f"outcomes: {cats}", soft_wrap=True)
    if card.pass_at_k:
        console.print("pass@k: " + ", ".join(f"k={k} {pct(v)}" for k, v in card.pass_at_k.items())
                      + " | pass^k: " + ", ".join(f"k={k} {pct(v)}" for k, v in (card.pass_hat_k or {}).items()))
    if card.mean_score is not None:
        console.print(f"checks passed (mean share per attempt): {pct(card.mean_score)}; "
                      f"graded only {pct(card.mean_score_graded)}")
    if card.benchmark is not None and card.benchmark.pass_at_k and len(card.benchmark.pass_at_k) > 1:
        bench = card.benchmark
        console.print(f"{bench.name or 'the benchmark'}'s own verdict, every k: pass@k "
                      + ", ".join(f"k={k} {pct(v)}" for k, v in bench.pass_at_k.items())
                      + " | pass^k " + ", ".join(f"k={k} {pct(v)}" for k, v in (bench.pass_hat_k or {}).items()),
                      highlight=False)
    if card.judged:
        console.print(f"judge ({card.judged} attempts, beside the verdicts): mean score {card.judge_mean:.2f}, "
                      f"agrees with the checks on {pct(card.judge_agreement)}")
    typer.echo(_summary_line(card))
    typer.echo(f"scorecard: {plan.folder.scorecard_html}")


def _summary_line(card) -> str:  # type: ignore[no-untyped-def]
    from orchard_cli.scoring.report import benchmark_lead, cost_text, duration, incomplete_note, pct

    note = incomplete_note(card)
    lead = benchmark_lead(card)
    return ((f"{card.suite}: INCOMPLETE ({note}); " if note else f"{card.suite}: ")
            + (f"{lead}; orchard strict: " if lead else "")
            + f"resolved {card.resolved}/{card.total} ({pct(card.resolved_rate)}); "
            f"graded only {pct(card.resolved_rate_graded)}; errors {card.errors} "
            f"(env {card.by_category['env_error']}, infra {card.by_category['infra_error']}); "
            f"wall {duration(card.wall_seconds)}; cost {cost_text(card)}")


@app.command("compare")
def compare(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A", file_okay=False, help="Run folder A (the baseline).")],
    run_b: Annotated[Path, typer.Argument(metavar="RUN_B", file_okay=False, help="Run folder B.")],
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Per-instance flips between two runs, and the paired difference in resolved rate (B - A).

    The 95% interval is a paired normal interval on per-instance differences (McNemar-style Wald);
    McNemar's exact p-value is shown with it.

    \b
    Example:
      orchard eval compare runs/baseline runs/student
    """
    from orchard_cli.scoring.compare import compare_runs, group_lines
    from orchard_cli.scoring.report import pct

    result = compare_runs(run_a, run_b)
    if fmt == OutputFormat.json:
        emit_json(result.model_dump(mode="json"))
        return
    low, high = result.ci95
    for warning in result.warnings:
        stderr_console().print(f"[yellow]warning:[/] {warning}")
    typer.echo(f"A {result.run_a}: {pct(result.rate_a)}  B {result.run_b}: {pct(result.rate_b)}  "
               f"({result.common} instances in common)")
    p = "n/a" if result.mcnemar_p is None else f"{result.mcnemar_p:.3g}"
    interval = (f"95% CI not shown ({result.ci_note})" if result.ci_note else
                f"95% CI [{100 * low:+.1f}, {100 * high:+.1f}] (paired, McNemar-style)")
    typer.echo(f"B - A: {100 * result.diff:+.1f} points, {interval}; McNemar exact p = {p}")
    typer.echo(f"better in A ({len(result.a_only)}): {', '.join(result.a_only) or '-'}")
    typer.echo(f"better in B ({len(result.b_only)}): {', '.join(result.b_only) or '-'}")
    if result.errors_a or result.errors_b:
        typer.echo(f"env/infra errors (scored as not resolved): A {', '.join(result.errors_a) or '-'}; "
                   f"B {', '.join(result.errors_b) or '-'}")
    if result.only_in_a or result.only_in_b:
        typer.echo(f"not paired: {len(result.only_in_a)} only in A, {len(result.only_in_b)} only in B")
    lines = group_lines(result)
    if lines:
        typer.echo("by group (B - A):")
        for line in lines:
            typer.echo(f"  {line}")


@app.command("regrade")
def regrade(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", file_okay=False, help="The folder of a finished `orchard eval` run.")],
    out: Annotated[Optional[Path], typer.Option("--out", file_okay=False, help="Where the regraded run goes (default: RUN/regrade, or RUN/regrade-2, -3 ... when that is taken).")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", "-b", help="Sandbox backend: {backends} (default: the run's).")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Episodes graded in parallel.")] = 1,
    resume: Annotated[bool, typer.Option("--resume", help="Continue a regrade in --out.")] = False,
    max_errors: Annotated[int, typer.Option("--max-errors", min=0, help="Instances with env/infra errors tolerated before exit 3.")] = 0,
    quiet: QuietOpt = False,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Grade a run's stored evidence again, without the agent: a new scorecard, and every verdict
    that changed.\n\nExit codes: as `orchard eval` (3 past --max-errors).

    \b
    Example:
      orchard eval regrade runs/claw-mini-20261204-101500
    """
    from orchard_cli.errors import InfraError
    from orchard_cli.rollout.eval_run import plan_regrade, verdict
    from orchard_cli.runs import RunFolder

    plan = plan_regrade(run_dir, out=out, workers=workers, backend=backend, resume=resume)
    console = stderr_console(quiet)
    console.print(f"[bold]orchard eval regrade[/] {run_dir}: {len(plan.pending)} episode(s), "
                  f"{busy(workers, len(plan.pending))}\n  run folder: {plan.out}", soft_wrap=True)
    card = _execute(plan, console, quiet)
    before = {(r.instance_id, r.attempt): r for r in RunFolder(run_dir).latest_results()}
    after = plan.folder.latest_results()
    changed = [(r.instance_id, r.attempt, before[(r.instance_id, r.attempt)].category, r.category)
               for r in after if (r.instance_id, r.attempt) in before
               and before[(r.instance_id, r.attempt)].category != r.category]
    if fmt == OutputFormat.json:
        emit_json({**card.model_dump(mode="json"),
                   "changed": [{"instance_id": i, "attempt": k, "before": a, "after": b} for i, k, a, b in changed]})
    else:
        _render(card, plan, console, fmt)
        typer.echo(f"verdicts changed: {len(changed)}" + "".join(f"\n  {i} #{k}: {a} -> {b}" for i, k, a, b in changed))
    code, reason = verdict(card, fail_under=None, max_errors=max_errors)
    if code == 3:
        raise InfraError(reason or "env/infra errors", hint=f"see {plan.folder.results} and logs/")
