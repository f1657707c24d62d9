"""`orchard rerank apply`: score each task's N candidate attempts from one or more eval runs with
a value model, pick one per task, and score the picks the way `orchard eval` scores a run.

Candidates of a task are its attempts in every run given, in order (run by run, attempt by
attempt). With `filter` (the default), candidates whose patch is empty or did not apply are
dropped before picking, when any other is left: that the patch applies is known from applying
it, before any test runs (for an episode without a patch, claw's: one that made no tool call and
gave no answer is dropped). The picked attempts' graded results make the scorecard (scorecard.json
/ .md / .html, the `orchard eval` format, plus a best-of-N section side by side: first attempt,
random pick (expected value), majority patch, shortest patch, value model, oracle = pass@N);
predictions.jsonl holds the picked patches (SWE-bench format); rerank.json every score.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from html import escape
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.value import data, metrics
from orchard_cli.value.reading import Reading, ReadProgress

Say = Callable[[str], None]
LABELS = {"first": "first attempt", "random": "random pick (expected)", "majority": "most common patch",
          "shortest": "shortest patch", "value": "value model", "oracle": "oracle (pass@N)"}
ACTION_LABELS = {**LABELS, "majority": "most common actions", "shortest": "fewest actions"}
"""Episodes without a patch (claw): majority and shortest compare what the agent did."""


def labels(report: "RerankReport") -> dict[str, str]:
    """The strategies' names for this report's candidates (patches, or actions)."""
    return LABELS if report.patches else ACTION_LABELS


def dropped_note(report: "RerankReport") -> str:
    """What the filter did, said where a rate is read ('' when it dropped nothing)."""
    if not report.filtered_out:
        return ""
    what = "empty or not applying" if report.patches else "no tool call and no answer"
    return (f"{report.filtered_out} of {report.candidates} candidate(s) were dropped before picking ({what}; "
            "--no-filter keeps them): first, random, majority, shortest and the value model pick among the rest")


class RerankConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value_model: str
    runs: list[str] = Field(min_length=1)
    out: str
    instances: list[str] | None = None
    filter: bool = True
    """Drop candidates whose patch is empty or did not apply (without a patch: that did nothing),
    when any other is left."""
    reading: Reading = Field(default_factory=Reading)
    """Where and how the base LM reads the candidates."""


class Candidate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run: int
    """Index of the run in `runs`."""
    attempt: int
    score: float
    category: str
    resolved: bool
    applies: bool
    kept: bool
    """Still a candidate after the filter."""
    patch_bytes: int


class TaskPicks(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str
    candidates: list[Candidate]
    picks: dict[str, int]
    """strategy -> index into `candidates` (first, majority, shortest, value)."""
    random: float
    oracle: bool


class RerankReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    value_model: str
    runs: list[str]
    suite: str
    tasks: int
    candidates: int
    filtered_out: int
    patches: bool = True
    """The candidates carry patches (SWE); False: their actions are compared (claw)."""
    strategies: dict[str, float]
    """Resolved rate over tasks of each strategy's pick."""
    resolved: dict[str, float]
    """Resolved tasks (expected, for random) of each strategy."""
    seconds: float
    candidates_per_second: float
    warnings: list[str] = Field(default_factory=list)
    per_task: list[TaskPicks] = Field(default_factory=list)


def _load_runs(paths: list[str]) -> tuple[data.RunInfo, list[list[data.Episode]], list[dict]]:
    from orchard_cli.runs import RunFolder

    infos, episodes, results = [], [], []
    for path in paths:
        info = data.run_info(path)
        infos.append(info)
        if infos[0].identity != info.identity:
            raise UsageError(f"candidates of different suites: {infos[0].path} is {infos[0].suite} "
                             f"(dataset {str(infos[0].dataset_sha256)[:12]}), {path} is {info.suite} "
                             f"(dataset {str(info.dataset_sha256)[:12]})",
                             hint="rerank the runs of one suite at a time")
    for info in infos:
        episodes.append(data.episodes_from_run(info.path)[1])
        results.append({(r.instance_id, r.attempt): r for r in RunFolder(info.path).latest_results()})
    return infos[0], episodes, results


def _picks(cands: list[data.Episode], scores: list[float], filter_: bool) -> tuple[list[int], dict[str, int]]:
    pool = [i for i, ep in enumerate(cands) if ep.applies] if filter_ else []
    pool = pool or list(range(len(cands)))
    patches = [cands[i].output for i in pool]
    picked = {"first": 0}
    for strategy in ("majority", "shortest", "value"):
        picked[strategy] = pool[metrics.pick(strategy, patches, [scores[i] for i in pool])]
    return pool, picked


def rerank_runs(config: RerankConfig, say: Say = lambda _: None) -> RerankReport:
    from orchard_cli.value.model import ValueModel

    out = Path(config.out)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"output folder {out} is not empty", hint="choose a new --out folder")
    model = ValueModel.load(config.value_model)
    info, per_run, results = _load_runs(config.runs)
    warnings = []
    if model.meta.suites and info.suite not in model.meta.suites:
        warnings.append(f"the value model was trained on {', '.join(model.meta.suites)}, not {info.suite}: "
                        "its scores on this suite are untested")
    by_task: dict[str, list[tuple[int, data.Episode]]] = {}
    wanted = set(config.instances) if config.instances else None
    for run_index, eps in enumerate(per_run):
        for ep in sorted(eps, key=lambda e: e.attempt):
            if wanted is None or ep.task_id in wanted:
                by_task.setdefault(ep.task_id, []).append((run_index, ep))
    if wanted is not None and (missing := sorted(wanted - set(by_task))):
        raise UsageError(f"{len(missing)} instance(s) not in the runs, e.g. {missing[0]}")
    if not by_task:
        raise UsageError("the runs hold no candidates")
    flat = [ep for cands in by_task.values() for _, ep in cands]
    model.reading = config.reading
    model.featurizer()  # loads the base and checks that the head fits it, before any work
    say(f"scoring {len(flat)} candidate(s) of {len(by_task)} task(s) with {config.value_model}")
    started = time.monotonic()
    progress = ReadProgress(f"reading with {model.meta.base.name}")
    try:
        scores = [float(s) for s in model.score(flat, progress)]
    finally:
        progress.close()
    seconds = time.monotonic() - started
    score_of = {id(ep): s for ep, s in zip(flat, scores)}
    per_task, selected, filtered_out = [], [], 0
    totals = {s: 0.0 for s in metrics.STRATEGIES}
    for task_id in sorted(by_task):
        cands = [ep for _, ep in by_task[task_id]]
        runs_of = [r for r, _ in by_task[task_id]]
        task_scores = [score_of[id(ep)] for ep in cands]
        pool, picked = _picks(cands, task_scores, config.filter)
        filtered_out += len(cands) - len(pool)
        resolved = [int(ep.resolved) for ep in cands]
        random_rate = sum(resolved[i] for i in pool) / len(pool)
        oracle = any(resolved)
        for strategy, index in picked.items():
            totals[strategy] += resolved[index]
        totals["random"] += random_rate
        totals["oracle"] += float(oracle)
        rows = [Candidate(run=runs_of[i], attempt=ep.attempt, score=round(task_scores[i], 6),
                          category=ep.category, resolved=ep.resolved, applies=ep.applies, kept=i in pool,
                          patch_bytes=len(ep.patch.encode())) for i, ep in enumerate(cands)]
        per_task.append(TaskPicks(instance_id=task_id, candidates=rows, picks=picked,
                                  random=round(random_rate, 6), oracle=oracle))
        chosen = picked["value"]
        selected.append((runs_of[chosen], cands[chosen]))
    n = len(by_task)
    report = RerankReport(
        value_model=str(Path(config.value_model).resolve()), runs=[str(Path(r).resolve()) for r in config.runs],
        suite=info.suite, tasks=n, candidates=len(flat), filtered_out=filtered_out,
        patches=any((ep.patch or "").strip() for ep in flat),
        strategies={s: round(v / n, 6) for s, v in totals.items()},
        resolved={s: round(v, 6) for s, v in totals.items()}, seconds=round(seconds, 2),
        candidates_per_second=round(len(flat) / seconds, 3) if seconds > 0 else 0.0,
        warnings=warnings, per_task=per_task)
    _write(out, config, info, report, selected, results)
    return report


def _write(out: Path, config: RerankConfig, info: data.RunInfo, report: RerankReport,
           selected: list[tuple[int, data.Episode]], results: list[dict]) -> None:
    from orchard_cli import __version__
    from orchard_cli.records import write_json, write_text
    from orchard_cli.runs import RunFolder
    from orchard_cli.runs.predictions import Prediction, PredictionsLog
    from orchard_cli.scoring.report import render_html, render_markdown
    from orchard_cli.scoring.scorecard import Reproducibility, compute_scorecard

    out.mkdir(parents=True, exist_ok=True)
    folder = RunFolder(out)
    picked_results, lines = [], []
    for run_index, ep in selected:
        original = results[run_index][(ep.task_id, ep.attempt)]
        log_dir = str((Path(config.runs[run_index]) / original.log_dir).resolve()) if original.log_dir else ""
        picked_results.append(original.model_copy(update={"attempt": 1, "log_dir": log_dir}))
        record = Prediction(instance_id=ep.task_id, model_name_or_path=ep.model or f"rerank:{Path(config.value_model).name}",
                            model_patch=ep.patch).swebench_record()
        lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    write_text(out / PredictionsLog.file_name(1), "".join(lines))
    card = compute_scorecard(
        picked_results, suite=info.suite, source=f"rerank:{Path(config.value_model).name} "
        f"(best of {report.candidates} candidates, {len(config.runs)} run(s))",
        reproducibility=Reproducibility(orchard_version=__version__, harness=info.harness,
                                        dataset_sha256=info.dataset_sha256,
                                        config=config.model_dump()))
    write_json(folder.config, {"schema_version": 1, **config.model_dump()})
    write_json(folder.scorecard, card)
    write_text(folder.scorecard_md, render_markdown(card, picked_results) + "\n" + markdown_section(report))
    html = render_html(card, picked_results)
    marker = "<section><h2>Reproducibility</h2>"
    write_text(folder.scorecard_html, html.replace(marker, html_section(report) + marker, 1))
    write_json(out / "rerank.json", report)


def markdown_section(report: RerankReport) -> str:
    lines = ["## Best of N: the candidate each strategy picks", "",
             f"{report.tasks} task(s), {report.candidates} candidate(s) from {len(report.runs)} run(s); "
             + (dropped_note(report) or "none dropped before picking") + ".", "",
             "| strategy | resolved | rate |", "| --- | ---: | ---: |"]
    for s in metrics.STRATEGIES:
        lines.append(f"| {labels(report)[s]} | {report.resolved[s]:g} | {100 * report.strategies[s]:.1f}% |")
    lines += ["", "This scorecard scores the value model's picks.", ""]
    return "\n".join(lines)


def html_section(report: RerankReport) -> str:
    bold = ' style="font-weight:600"'
    rows = "".join(f"<tr{bold if s == 'value' else ''}><td>{escape(labels(report)[s])}</td>"
                   f"<td class='n' data-strategy='{s}'>{report.resolved[s]:g}</td>"
                   f"<td class='n'>{100 * report.strategies[s]:.1f}%</td></tr>" for s in metrics.STRATEGIES)
    return ("<section><h2>Best of N</h2><table><thead><tr><th>strategy</th><th class='n'>resolved</th>"
            f"<th class='n'>rate</th></tr></thead><tbody>{rows}</tbody></table><p class='note'>"
            f"{report.tasks} task(s), {report.candidates} candidate(s); this scorecard scores the value "
            "model's picks. Random = the expected rate of a uniform pick; oracle = pass@N. "
            f"{escape(dropped_note(report))}</p></section>")
