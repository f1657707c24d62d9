"""The recipe's data stages: synth (training and held-out tasks), distill (demonstrations)."""

from __future__ import annotations

import shutil
from typing import Any

from orchard_cli.errors import UsageError
from orchard_cli.outcome import ERROR_CATEGORIES
from orchard_cli.recipe import lines
from orchard_cli.recipe.config import BUNDLED_SUITE
from orchard_cli.recipe.context import Ctx, add_cost, fresh
from orchard_cli.recipe.state import StageRecord, digest, file_digest, tree_digest
from orchard_cli.records import iter_jsonl


def known_templates(family: str) -> list[str]:
    from orchard_cli.synthesis import load_synthesizer

    return load_synthesizer(family).templates() or []


def chosen_templates(config: Any) -> tuple[list[str], list[str]]:
    """(templates trained on, templates held out)."""
    from orchard_cli.synthesis import choose

    known = known_templates(config.family)
    chosen = choose(config.synth.templates, config.synth.exclude_templates, known, config.family)
    return chosen, [t for t in known if t not in chosen]


def _synthesize(family: str, out: Any, n: int, seed: int, names: list[str], backend: str, workers: int,
                say: Any) -> dict[str, Any]:
    from orchard_cli.synthesis import SynthRequest, load_synthesizer

    result = load_synthesizer(family).run(SynthRequest(n=n, seed=seed, backend=backend, workers=workers,
                                                       out_dir=out, templates=names), say=say)
    return {"kept": result.kept, "dropped": result.dropped}


def _load(ctx: Ctx, name: str) -> list[Any]:
    from orchard_cli.tasks.registry import load_suite

    folder = ctx.tasks(name)
    if not folder.is_dir() or not any(folder.iterdir()):
        return []
    return load_suite(str(folder), family=ctx.config.family)[1]


def _drop(ctx: Ctx, name: str, ids: dict[str, str], why: str) -> None:
    for task_id, twin in sorted(ids.items()):
        shutil.rmtree(ctx.tasks(name) / task_id, ignore_errors=True)
        ctx.say(f"  {name}: left out {task_id}: same content (prompt and fixture) as {twin} of {why}")


def synth(ctx: Ctx, record: StageRecord, continuing: bool) -> None:
    """Training tasks, held-out seeds of the same templates, held-out templates; then every set is
    made disjoint by content from the sets before it and from the family's bundled suite."""
    from orchard_cli.tasks.content import overlap
    from orchard_cli.tasks.registry import load_suite

    config, part = ctx.config, ctx.config.synth
    chosen, others = chosen_templates(config)
    if part.unseen_n and not others:
        raise UsageError("--unseen-n asks for tasks of templates not trained on, and every template is trained on",
                         hint="choose the training templates with --templates")
    sets = [("train", part.n, part.seed, chosen), ("heldout", part.heldout_n, part.heldout_seed, chosen)]
    if part.unseen_n:
        sets.append(("unseen", part.unseen_n, part.unseen_seed, others))
    everything = known_templates(config.family)
    kept: dict[str, int] = {}
    dropped: dict[str, dict[str, str]] = {}
    for name, n, seed, names in sets:
        out = fresh(ctx.tasks(name))
        ctx.command(record, lines.synth(config.family, n, seed, None if names == everything else names, str(out),
                                        config.eval.workers))
        made = _synthesize(config.family, out, n, seed, names, config.backend, config.eval.workers,
                           lambda line, name=name: ctx.say(f"  {name}: {line}"))
        kept[name], dropped[name] = made["kept"], made["dropped"]
    _, bundled = load_suite(BUNDLED_SUITE[config.family])
    overlaps: dict[str, dict[str, str]] = {}
    earlier: list[Any] = list(bundled)
    for name, *_ in sets:
        tasks = _load(ctx, name)
        twins = overlap(tasks, earlier)
        if twins:
            overlaps[name] = twins
            _drop(ctx, name, twins, f"an earlier set or {BUNDLED_SUITE[config.family]}")
        earlier += [t for t in tasks if t.task_id not in twins]
        kept[name] = len(tasks) - len(twins)
        if not kept[name]:
            raise UsageError(f"the {name} set holds no task after synthesis (asked {dict((s[0], s[1]) for s in sets)[name]})",
                             hint="see the dropped tasks above; try another --seed")
    digests = {name: tree_digest(ctx.tasks(name)) for name, *_ in sets}
    record.result = {"kept": kept, "dropped": dropped, "overlap": overlaps, "digests": digests,
                     "templates": {"train": chosen, "unseen": others if part.unseen_n else []}}
    record.outputs = digest(digests)
    ctx.say("  tasks: " + ", ".join(f"{name} {count}" for name, count in kept.items()))


def distill(ctx: Ctx, record: StageRecord, continuing: bool) -> None:
    """The teacher's demonstrations on the training tasks, in the chosen harness."""
    config = ctx.config
    gold = config.distill.teacher == "gold"
    summary, plan, bugs = _demonstrations(ctx, record, continuing, ctx.folder.path("distill", "demos.jsonl"),
                                          teachers=[] if gold else [config.distill.teacher],
                                          base_url=config.teacher_url, key_env=config.distill.key_env)
    for task_id, category in sorted(bugs.items()):
        if gold:
            ctx.say(f"  REFERENCE BUG: gold's demonstration of {task_id} did not resolve ({category}): the task's "
                    "reference solution is wrong, or the harness cannot play it")
    if not summary.resolved:
        raise UsageError(f"the teacher resolved none of the {summary.planned} training episodes: nothing to train on",
                         hint=f"see {plan.run_dir}/logs/")
    record.result = {"episodes": summary.finished, "resolved": summary.resolved, "errors": summary.errors,
                     "unresolved": bugs, "reference_bugs": sorted(bugs) if gold else [],
                     "teacher": ", ".join(plan.teachers), "wall_seconds": summary.wall_seconds}
    record.outputs = file_digest(ctx.folder.path("distill", "demos.jsonl"))


def near_miss_data(ctx: Ctx, record: StageRecord, continuing: bool) -> str:
    """The near-miss control's demonstrations: each training task's near miss played by the
    `near-miss` demonstrator through the same harness; returns the file. A near miss that resolves
    is a bug in the task's near miss, reported as such (it is kept: the control is what it is)."""
    out = ctx.folder.path("near-miss", "demos.jsonl")
    summary, plan, _ = _demonstrations(ctx, record, continuing, out, teachers=[], base_url="near-miss")
    finished = summary.finished - summary.errors
    if finished <= 0:
        raise UsageError(f"the near-miss demonstrator finished none of the {summary.planned} training episodes",
                         hint=f"see {plan.run_dir}/logs/")
    if summary.resolved:
        ctx.say(f"  NEAR-MISS BUG: {summary.resolved} of {finished} near misses resolved their task")
    kept = ctx.folder.path("near-miss", "demos-kept.jsonl")
    count = _without_errors(out, kept)
    ctx.say(f"  (no command of its own) the {count} near-miss demonstrations that ran (an env or infra error is "
            f"no demonstration) -> {kept}")
    record.result["near_miss"] = {"episodes": summary.finished, "resolved": summary.resolved, "kept": count,
                                  "errors": summary.errors, "categories": _categories(plan.run_dir)}
    return str(kept)


def _without_errors(source: Any, out: Any) -> int:
    """`source`'s trajectories whose outcome is not an error category, written to `out`."""
    from orchard_cli.records import JsonlWriter
    from orchard_cli.trajectory import read_trajectories

    fresh(out)
    writer, count = JsonlWriter(out), 0
    try:
        for trajectory in read_trajectories(source):
            if trajectory.outcome.category not in ERROR_CATEGORIES:
                writer.write(trajectory)
                count += 1
    finally:
        writer.close()
    return count


def _categories(run_dir: Any) -> dict[str, int]:
    from collections import Counter

    latest = {row["episode_id"]: row for row in iter_jsonl(run_dir / "episodes.jsonl")}
    return dict(Counter(row.get("category") or "?" for row in latest.values()))


def _demonstrations(ctx: Ctx, record: StageRecord, continuing: bool, out: Any, *, teachers: list[str],
                    base_url: str, key_env: str | None = None) -> tuple[Any, Any, dict[str, str]]:
    """`orchard distill` of the training tasks into `out`: (summary, plan, the unresolved episodes'
    categories by task, errors aside)."""
    from orchard_cli.rollout.agent import EpisodeOptions
    from orchard_cli.rollout.distill_run import DistillConfig, plan_distill, run_dir_of

    config = ctx.config
    if not continuing:
        fresh(out)
        fresh(run_dir_of(out))
    distill_config = DistillConfig(
        suite=str(ctx.tasks("train")), family=config.family, teachers=teachers,
        base_url=base_url, api_key_env=key_env, harness=config.harness,
        attempts=config.distill.attempts, workers=config.eval.workers, backend=config.backend, out=str(out),
        options=EpisodeOptions(timeout_seconds=config.eval.timeout))
    ctx.command(record, lines.distill(distill_config))
    plan = plan_distill(distill_config, resume=continuing and out.exists())
    summary = plan.execute(lambda trajectory, totals: ctx.say(
        f"  {trajectory.task_id}: {trajectory.outcome.category} ({totals.resolved}/{totals.episodes} resolved)")
        if ctx.progress else None)
    add_cost(record, summary.tokens_in, summary.tokens_out, summary.cost_usd)
    latest = {row["episode_id"]: row for row in iter_jsonl(run_dir_of(out) / "episodes.jsonl")}
    bugs = {row["task_id"]: row["category"] for row in latest.values()
            if not row.get("resolved") and row.get("category") not in ERROR_CATEGORIES}
    return summary, plan, bugs


def control_data(ctx: Ctx, record: StageRecord) -> str:
    """The shuffled demonstrations (control.py) beside the real ones; returns the file."""
    from orchard_cli.recipe.control import shuffle_demonstrations

    source = ctx.folder.path("distill", "demos.jsonl")
    out = ctx.folder.path("control", "demos-shuffled.jsonl")
    made = shuffle_demonstrations(source, out, seed=ctx.config.control.seed)
    ctx.say(f"  (no command of its own) {made['demonstrations']} demonstrations of {source.name} with each task's "
            f"turns given to another task of its template (seed {ctx.config.control.seed}) -> {out}")
    record.result.update({"shuffled": made})
    return str(out)
