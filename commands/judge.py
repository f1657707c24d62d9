"""`orchard judge RUN [--method auto|webjudge|webvoyager|deepshop] ...` and `orchard judge export RUN --out DIR`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import (FormatOpt, NoPreflightOpt, OutputFormat, QuietOpt, default_command_group,
                                          emit_json, stderr_console)

app = typer.Typer(cls=default_command_group("run", "RUN [OPTIONS] | export RUN --out DIR"), no_args_is_help=True,
                  help="Judge a web run's episodes from their screenshots with a vision model (WebJudge, "
                       "WebVoyager's auto-eval), or export it in Online-Mind2Web's layout.")


@app.command("run")
def run(
    run_dir: Annotated[Path, typer.Argument(file_okay=False, help="An `orchard eval` run folder (web tasks).")],
    judge_model: Annotated[str, typer.Option("--judge-model", help="The judge's model name.")],
    judge_base_url: Annotated[str, typer.Option("--judge-base-url", help="The judge's OpenAI-compatible endpoint (vision).")],
    method: Annotated[str, typer.Option("--method", help="auto (the suite's own: webvoyager, webjudge for Online-Mind2Web, deepshop; else webjudge), webjudge, webvoyager or deepshop (DeepShop's per-aspect rule).")] = "auto",
    judge_key_env: Annotated[Optional[str], typer.Option("--judge-key-env", help="Environment variable holding the judge's key (default OPENAI_API_KEY when set).")] = None,
    threshold: Annotated[int, typer.Option("--threshold", min=1, max=5, help="webjudge: screenshots scoring at least this reach the verdict.")] = 3,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Attempts judged in parallel.")] = 1,
    out: Annotated[Optional[Path], typer.Option("--out", file_okay=False, help="Where judged.jsonl and scorecard.json go (default RUN/judge-METHOD).")] = None,
    no_preflight: NoPreflightOpt = False,
    quiet: QuietOpt = False,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Judge every graded attempt of RUN; the judge model, the prompts' hash and per-task reasons go
    in RUN/judge-METHOD/scorecard.json.

    \b
    Example:
      orchard judge runs/wv --judge-model M --judge-base-url https://host/v1
    """
    from orchard_cli.errors import UsageError
    from orchard_cli.scoring.rubric_judge import JudgeConfig
    from orchard_cli.preflight import Endpoint, check_endpoints
    from orchard_cli.runs import RunFolder
    from orchard_cli.webjudge.run import judge_run, method_for

    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run folder")
    RunFolder(run_dir).require()  # the run's own checks come before the endpoint's
    method = method_for(run_dir, method)
    config = JudgeConfig(model=judge_model, base_url=judge_base_url, key_env=judge_key_env)
    from orchard_cli.commands._progress import RunProgress

    console = stderr_console(quiet)
    checked = check_endpoints([Endpoint("--judge-base-url", judge_base_url, judge_model, judge_key_env)],
                              enabled=not no_preflight)
    for line in checked:
        console.print(f"  endpoint {line}", markup=False)
    with RunProgress("judge", None, console=console, quiet=quiet, unit="attempt", good="success") as progress:

        def on_attempt(row) -> None:  # type: ignore[no-untyped-def]
            verdict = "error" if row.success is None else ("success" if row.success else "failure")
            progress.tick(resolved=bool(row.success), error=row.success is None)
            progress.say(f"  {row.task_id} #{row.attempt}: {verdict} ({row.screenshots} screenshot(s), {row.calls} call(s))"
                         + (f": {row.error}" if row.error else ""))

        card = judge_run(run_dir.resolve(), method, config, threshold=threshold, workers=workers,
                         out=out.resolve() if out else None, on_attempt=on_attempt)
    if fmt == OutputFormat.json:
        emit_json(card.model_dump(mode="json"))
    if card.attempts and not card.judged:
        from orchard_cli.errors import InfraError

        first = next((r["error"] for rows in card.by_task.values() for r in rows if r.get("error")), "")
        raise InfraError(f"the judge decided none of the {card.attempts} attempt(s): {first}",
                         hint="check --judge-model, --judge-base-url, the key, and that the model takes images")
    if fmt == OutputFormat.json:
        return
    rate = "-" if card.success_rate is None else f"{card.success_rate:.1%}"
    agree = "" if card.agreement is None else f"; agrees with the run's checks on {card.agreement:.1%}"
    typer.echo(f"judge {method} ({judge_model}): {card.successes}/{card.judged} success ({rate}); "
               f"{card.errors} not decided{agree}")
    if card.aspect_rates:
        typer.echo("per aspect: " + ", ".join(f"{name} {rate_:.1%}" for name, rate_ in card.aspect_rates.items()))
    typer.echo(f"scorecard: {(out or run_dir / f'judge-{method}') / 'scorecard.json'}")


@app.command("export")
def export(
    run_dir: Annotated[Path, typer.Argument(file_okay=False, help="An `orchard eval` run folder (web tasks).")],
    out: Annotated[Path, typer.Option("--out", file_okay=False, help="New folder: one folder per attempt (result.json, trajectory/).")],
) -> None:
    """Write RUN in Online-Mind2Web's trajectory layout (result.json + trajectory/ screenshots), which
    their own auto-eval scripts read.

    \b
    Example:
      orchard judge export runs/om2w --out om2w-layout
    """
    from orchard_cli.errors import UsageError
    from orchard_cli.webjudge.mind2web import export_mind2web

    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run folder")
    count = export_mind2web(run_dir.resolve(), out.resolve())
    typer.echo(f"exported {count} attempt(s) to {out}")
