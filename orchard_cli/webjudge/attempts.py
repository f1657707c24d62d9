"""A web run's graded attempts, as a judge reads them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchard_cli.errors import UsageError
from orchard_cli.evidence import EVIDENCE_FILE, SCREENSHOT

STEP = re.compile(r"^step-(\d+)\.png$")


@dataclass
class JudgedEpisode:
    task_id: str
    attempt: int
    task: str
    """The instruction the agent was given (the task's own prompt, without orchard's tool notes)."""
    answer: str | None
    actions: list[str]
    screenshots: list[Path]
    """In step order: the start page, then the page after each action; the last page when the run
    kept no step screenshots (runs from before they were kept)."""
    resolved: bool | None = None
    """The family's own verdict from program checks; None when the task has none (a live-web task)."""
    record: dict[str, Any] = field(default_factory=dict)


def action_text(tool: str, arguments: dict[str, Any]) -> str:
    """One action as BrowserGym writes it: click(bid='e12')."""
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return f"{tool}({args})"


def screenshots(folder: Path) -> list[Path]:
    steps = sorted((int(m.group(1)), p) for p in folder.glob("step-*.png") if (m := STEP.match(p.name)))
    if steps:
        return [p for _, p in steps]
    last = folder / SCREENSHOT
    return [last] if last.is_file() else []


def read_run(run: Path) -> list[JudgedEpisode]:
    """Every graded attempt of an eval run folder (errors left out: nothing to judge)."""
    from orchard_cli.runs import RunFolder

    folder = RunFolder(run).require()
    tasks = {t.task_id: t for t in folder.read_tasks()}
    out = []
    for result in folder.latest_results():
        if result.is_error or not result.log_dir:
            continue
        attempt_dir = run / result.log_dir
        try:
            evidence = json.loads((attempt_dir / EVIDENCE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        task = tasks.get(result.instance_id)
        record = task.record if task is not None else {}
        instruction = record.get("prompt") or (task.problem_statement if task is not None else result.instance_id)
        actions = [action_text(d["tool"], d.get("arguments") or {}) + ("" if d.get("status") == 200 else " (failed)")
                   for d in evidence.get("dispatches") or [] if d.get("tool") not in ("observe",)]
        out.append(JudgedEpisode(task_id=result.instance_id, attempt=result.attempt, task=instruction,
                                 answer=evidence.get("answer"), actions=actions, screenshots=screenshots(attempt_dir),
                                 resolved=result.resolved if result.checks else None, record=record))
    if not out:
        raise UsageError(f"{run} has no graded attempt to judge")
    return out
