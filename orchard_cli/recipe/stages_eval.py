"""The recipe's eval stages: each arm (base, student, control, rl, teacher) on each held-out set,
through `orchard eval` in the same harness with the same limits and decoding.

A local model (the base, a trained checkpoint) is served the way `orchard serve` serves it, in this
process, on a port derived from the run folder and the arm (so an interrupted eval continues with
the same --base-url); its replies are capped at `eval.max_reply_tokens` and decoded at
`eval.temperature` (0: greedy). The teacher is evaluated through its own endpoint (gold: the
ceiling of the recipe, every reference played).
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from orchard_cli.errors import InfraError
from orchard_cli.recipe import lines
from orchard_cli.recipe.context import SET_LABELS, Ctx, add_cost, fresh
from orchard_cli.recipe.state import StageRecord, digest
from orchard_cli.runs import RunFolder

ARMS = ("teacher", "base", "student", "control", "near-miss", "rl")
ARM_LABELS = {"base": "base", "student": "SFT", "control": "SFT on shuffled demos",
              "near-miss": "SFT on near-miss demos", "rl": "SFT + RL", "teacher": "teacher"}


def _port(key: str) -> int:
    return 20000 + int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 20000


@contextmanager
def served(ctx: Ctx, spec: str, arm: str) -> Iterator[str]:
    """`spec` (smollm2 or a checkpoint folder) served on loopback; yields its base URL."""
    from orchard_cli.models.local_server import LocalEndpoint

    part = ctx.config.eval
    options = {"threads": part.threads, "default_temperature": part.temperature,
               "default_max_tokens": part.max_reply_tokens, "device": serve_device(ctx.config.device)}
    endpoint = LocalEndpoint(spec, port=_port(f"{ctx.folder.root.resolve()}:{arm}"), **options)
    try:
        info = endpoint.start()
    except InfraError:  # the port is taken: any free one (an interrupted eval then starts over)
        endpoint = LocalEndpoint(spec, port=0, **options)
        info = endpoint.start()
    try:
        yield info.base_url
    finally:
        endpoint.stop()


def serve_device(device: str) -> str:
    """cpu, or cuda when asked (or `auto` and torch sees a GPU)."""
    if device == "auto":
        try:
            import torch
        except ModuleNotFoundError:
            return "cpu"
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def model_of(ctx: Ctx, arm: str) -> str | None:
    """What the arm serves: a checkpoint folder, the base model; None for the teacher."""
    folder = ctx.folder
    return {"base": ctx.config.student, "student": str(folder.path("student")),
            "control": str(folder.path("control", "student")),
            "near-miss": str(folder.path("near-miss", "student")),
            "rl": str(folder.path("rl", "run", "model"))}.get(arm)


def _eval_one(ctx: Ctx, record: StageRecord, continuing: bool, arm: str, name: str, base_url: str,
              model: str, served: bool) -> dict[str, Any]:
    from orchard_cli.rollout.eval_run import EvalConfig, plan_eval

    config = ctx.config
    out = ctx.folder.path("eval", f"{arm}-{name}")
    tasks = sum(1 for p in ctx.tasks(name).iterdir() if p.is_dir())
    eval_config = EvalConfig(
        suite=str(ctx.tasks(name)), family=config.family, backend=config.backend, attempts=config.eval.attempts,
        model=model, base_url=base_url, harness=config.harness, max_turns=config.eval.max_turns,
        timeout=config.eval.timeout, workers=config.eval.workers,
        max_errors=tasks * config.eval.attempts, out=str(out))
    resume = continuing and RunFolder(out).read_config().get("base_url") == base_url
    if not resume:
        fresh(out)
    ctx.command(record, lines.evaluate(eval_config))
    run = plan_eval(eval_config, resume=resume)
    total = len(run.pending)
    done = [0, 0]

    def on_result(row: Any) -> None:
        done[0] += 1
        done[1] += int(row.resolved)
        if ctx.progress:
            ctx.say(f"  {ARM_LABELS[arm]} on {SET_LABELS[name]}: {row.instance_id} {row.category} "
                    f"({done[1]}/{done[0]} resolved, {total - done[0]} to go)")

    card = run.execute(on_result)
    add_cost(record, card.tokens.input if card.tokens else 0, card.tokens.output if card.tokens else 0,
             card.cost_usd if card.cost_known else (0.0 if served else None))
    ctx.say(f"  {ARM_LABELS[arm]} on {SET_LABELS[name]}: {card.resolved}/{card.total} resolved "
            f"({card.resolved_rate:.1%}), {card.errors} error(s)")
    return {"out": str(out), "resolved": card.resolved, "total": card.total, "rate": card.resolved_rate,
            "errors": card.errors, "pass_at_k": card.pass_at_k, "pass_hat_k": card.pass_hat_k}


def evaluate(ctx: Ctx, record: StageRecord, continuing: bool, arm: str) -> None:
    config = ctx.config
    results: dict[str, Any] = {}
    spec = model_of(ctx, arm)
    if spec is None:
        for name in ctx.eval_sets():
            results[name] = _eval_one(ctx, record, continuing, arm, name, config.teacher_url,
                                      config.distill.teacher, config.teacher_url == "gold")
    else:
        with served(ctx, spec, arm) as url:
            port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
            ctx.command(record, lines.serve(spec, port, config.eval.max_reply_tokens, config.eval.temperature,
                                            config.eval.threads, serve_device(config.device)))
            for name in ctx.eval_sets():
                results[name] = _eval_one(ctx, record, continuing, arm, name, url, arm, True)
    record.result = results
    record.outputs = digest({name: _results_digest(Path(r["out"])) for name, r in results.items()})


def _results_digest(out: Path) -> str:
    from orchard_cli.recipe.state import file_digest

    path = RunFolder(out).results
    return file_digest(path) if path.is_file() else ""
