"""Judging a run folder: RUN/judge-METHOD/judged.jsonl (one line per attempt) and scorecard.json.

The scorecard holds the judge model, the method, the prompts' sha256, the success rate over the
attempts the judge decided, per task its verdicts and reasons, and, where the run's family graded
the attempts with programs (web-mini's checks), how often the judge agrees with them.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.scoring.rubric_judge import JudgeConfig
from orchard_cli.webjudge.attempts import JudgedEpisode, read_run
from orchard_cli.webjudge.methods import Verdict, judge, prompt_sha256


class JudgedAttempt(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    task_id: str
    attempt: int
    success: bool | None
    resolved: bool | None
    """The run's own verdict (program checks), for agreement."""
    reasons: str = ""
    error: str | None = None
    calls: int = 0
    screenshots: int = 0
    details: dict[str, Any] = Field(default_factory=dict)


class JudgeScorecard(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    run: str
    method: str
    judge_model: str
    judge_base_url: str
    prompt_sha256: str
    threshold: int | None
    attempts: int
    judged: int
    errors: int
    successes: int
    success_rate: float | None
    """Successes over the attempts the judge decided."""
    agreement: float | None
    """Share of decided attempts where the judge agrees with the run's own verdict."""
    aspect_rates: dict[str, float] | None = None
    """deepshop: per aspect (attribute, filter, sort), the share of the attempts whose query has it
    that the judge passed on it (DeepShop's per-aspect accuracies)."""
    by_task: dict[str, list[dict[str, Any]]]
    wall_seconds: float


def asker(config: JudgeConfig) -> Callable[[list[dict[str, Any]]], str]:
    """The judge endpoint as `messages -> reply text` (the official openai client, temperature 0)."""
    from orchard_cli.scoring.rubric_judge import Judge

    client = Judge(config).client

    def ask(messages: list[dict[str, Any]]) -> str:
        reply = client.chat.completions.create(model=config.model, temperature=0, messages=messages)
        return reply.choices[0].message.content or ""

    return ask


WEB_FAMILIES = frozenset({"web", "miniwob", "live-web"})
"""The families whose episodes leave the screenshots a vision judge reads."""


def method_for(run: Path, method: str) -> str:
    """`auto`: the run's suite's own method (webvoyager, webjudge for Online-Mind2Web, deepshop),
    webjudge for any other web run. A named method is checked: deepshop needs DeepShop's aspects."""
    from orchard_cli.errors import UsageError
    from orchard_cli.runs import RunFolder
    from orchard_cli.webjudge.methods import METHODS, SUITE_METHOD

    tasks = RunFolder(run).read_tasks()
    suites = {t.suite for t in tasks}
    families = {t.family for t in tasks}
    if tasks and not families & WEB_FAMILIES:
        raise UsageError(f"{run} is not a web run (its tasks are {', '.join(sorted(families))} tasks); "
                         "orchard judge reads the screenshots web episodes leave",
                         hint="judge a run of web-mini, miniwob, webvoyager, online-mind2web or deepshop; "
                              "for other runs, `orchard eval SUITE --judge-model M --judge-base-url U` scores beside the checks")
    if method == "auto":
        own = {SUITE_METHOD.get(s, "webjudge") for s in suites} or {"webjudge"}
        return sorted(own)[0] if len(own) == 1 else "webjudge"
    if method not in METHODS:
        raise UsageError(f"--method {method!r}: use auto, {', '.join(METHODS)}")
    if method == "deepshop" and tasks and not any(t.suite == "deepshop" for t in tasks):
        raise UsageError(f"--method deepshop judges DeepShop's aspects, and {run} holds no DeepShop task",
                         hint="orchard eval deepshop --dataset FILE --network full ..., or --method webjudge")
    return method


def judge_run(run: Path, method: str, config: JudgeConfig, *, threshold: int = 3, workers: int = 1,
              out: Path | None = None, on_attempt: Callable[[JudgedAttempt], None] | None = None) -> JudgeScorecard:
    from orchard_cli.records import JsonlWriter, write_json
    from orchard_cli.rollout.agent import safe_url

    episodes = read_run(run)
    ask = asker(config)
    folder = out or run / f"judge-{method}"
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / "judged.jsonl.partial"
    for old in (partial, folder / "judged.jsonl", folder / "scorecard.json"):  # never read as this run's
        old.unlink(missing_ok=True)
    writer = JsonlWriter(partial)
    started = time.monotonic()
    judged: list[JudgedAttempt] = []

    def one(episode: JudgedEpisode) -> JudgedAttempt:
        verdict: Verdict = judge(method, ask, episode, threshold=threshold)
        return JudgedAttempt(task_id=episode.task_id, attempt=episode.attempt, success=verdict.success,
                             resolved=episode.resolved, reasons=verdict.reasons, error=verdict.error,
                             calls=verdict.calls, screenshots=len(episode.screenshots), details=verdict.details)

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for row in pool.map(one, episodes):
                writer.write(row)
                judged.append(row)
                if on_attempt is not None:
                    on_attempt(row)
    finally:
        writer.close()
    partial.replace(folder / "judged.jsonl")  # whole, or not under its final name
    decided = [j for j in judged if j.success is not None]
    aspect_rates = None
    if method == "deepshop":
        from orchard_cli.webjudge.methods import WHOLE

        marks: dict[str, list[bool]] = {}
        for j in decided:
            for name, passed in (j.details.get("aspects") or {}).items():
                if passed is not None and name != WHOLE:  # DeepShop's aspects only
                    marks.setdefault(name, []).append(bool(passed))
        aspect_rates = {name: round(sum(v) / len(v), 4) for name, v in marks.items()}
    compared = [j for j in decided if j.resolved is not None]
    by_task: dict[str, list[dict[str, Any]]] = {}
    for j in judged:
        by_task.setdefault(j.task_id, []).append({"attempt": j.attempt, "success": j.success, "resolved": j.resolved,
                                                  "reasons": j.reasons[-500:], "error": j.error})
    card = JudgeScorecard(
        run=str(run), method=method, judge_model=config.model, judge_base_url=safe_url(config.base_url),
        prompt_sha256=prompt_sha256(method), threshold=threshold if method == "webjudge" else None,
        attempts=len(judged), judged=len(decided), errors=len(judged) - len(decided),
        successes=sum(bool(j.success) for j in decided),
        success_rate=round(sum(bool(j.success) for j in decided) / len(decided), 4) if decided else None,
        agreement=round(sum(j.success == j.resolved for j in compared) / len(compared), 4) if compared else None,
        aspect_rates=aspect_rates,
        by_task=by_task, wall_seconds=round(time.monotonic() - started, 3))
    write_json(folder / "scorecard.json", card)
    return card
