"""A run in Online-Mind2Web's trajectory layout, which their auto-eval scripts read:

    OUT/<task_id>/result.json       {"task_id", "task", "final_result_response", "action_history": [...],
                                     "thoughts": [...]}   (their v1 format)
    OUT/<task_id>/trajectory/<n>_screenshot.png   the page after action n (0: the start page)

A task with several attempts gets one folder per attempt (`<task_id>__attempt-<k>`); the first
attempt keeps the plain id. Files are written under a temporary folder and renamed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from orchard_cli.errors import UsageError
from orchard_cli.webjudge.attempts import read_run


def export_mind2web(run: Path, out: Path) -> int:
    """Write every graded attempt of `run`; returns how many folders were written."""
    episodes = read_run(run)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {out} is not empty", hint="pass a new folder")
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        _write(episodes, partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if out.exists():
        out.rmdir()
    partial.rename(out)
    return len(episodes)


def _write(episodes: list, partial: Path) -> None:
    from orchard_cli.runs import safe_name

    partial.mkdir(parents=True)
    for episode in episodes:
        name = safe_name(episode.task_id) + ("" if episode.attempt == 1 else f"__attempt-{episode.attempt}")
        folder = partial / name
        (folder / "trajectory").mkdir(parents=True)  # two ids of one safe name: FileExistsError, nothing left
        for n, shot in enumerate(episode.screenshots):
            shutil.copyfile(shot, folder / "trajectory" / f"{n}_screenshot.png")
        result = {"task_id": name, "task": episode.task, "final_result_response": episode.answer or "",
                  "action_history": episode.actions, "thoughts": []}
        (folder / "result.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
