"""Claw suites made by synthesis: n tasks of chosen templates, validated three ways, as folders.

    templates()                          every template name, sorted
    choose(templates, exclude)           the templates a run draws from (unknown names refused)
    plan(n, seed, chosen)                n (template, task seed) pairs, round-robin over `chosen`;
                                         task seeds are seed*1000 + i (i < 1000), so two seeds
                                         never share a task seed
    synth_validated(out, n, seed, ...)   written to a staging folder, validated (gold passes, a
                                         null run and the near miss fail), the valid ones copied
                                         to `out`: what `orchard tasks synth --family claw` does

The bundled claw-mini is `synth_validated(..., n=44, seed=1)` over every template.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from orchard_cli.errors import UsageError
from orchard_cli.synthesis import TemplateSynthesizer

MAX_PER_SEED = 1000


def templates() -> list[str]:
    from orchard_cli.tasks.claw.synth import TEMPLATES

    return sorted(TEMPLATES)


def describe() -> list[dict[str, str]]:
    """Each template with its category and difficulty (what `tasks synth --family claw --list` prints)."""
    from orchard_cli.tasks.claw.synth import synthesize

    rows = []
    for name in templates():
        task = synthesize(name, 0)
        rows.append({"template": name, "category": task["category"], "difficulty": task["difficulty"],
                     "prompt": task["prompt"]})
    return rows


def choose(chosen: list[str] | None = None, exclude: list[str] | None = None) -> list[str]:
    """The templates to draw from: `chosen` (default all) minus `exclude` (unknown names refused)."""
    from orchard_cli.synthesis import choose as pick

    return pick(chosen, exclude, templates(), "claw")


def plan(n: int, seed: int, chosen: list[str] | None = None) -> list[tuple[str, int]]:
    """n (template, task seed) pairs, round-robin over the chosen templates (sorted)."""
    if n > MAX_PER_SEED:
        raise UsageError(f"--n {n}: at most {MAX_PER_SEED} tasks per seed (task seeds are seed*1000+i)")
    kinds = sorted(chosen or templates())
    return [(kinds[i % len(kinds)], seed * 1000 + i) for i in range(n)]


def synth_validated(out: Path, n: int, seed: int, *, chosen: list[str] | None = None, backend: str = "local",
                    workers: int = 1, say: Callable[[str], None] | None = None,
                    on_task: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """Synthesise n claw tasks into folders under `out`, keeping those valid three ways; the
    report names each one dropped and why. `on_task` hears each task's validation as it ends."""
    from orchard_cli.tasks.claw.synth import synthesize
    from orchard_cli.tasks.claw.taskfile import TaskFile, dump_task
    from orchard_cli.tasks.registry import load_suite
    from orchard_cli.tasks.validate import validate_tasks

    out = Path(out)
    pairs = plan(n, seed, chosen)
    staging = Path(tempfile.mkdtemp(prefix=".claw-synth-", dir=out.parent if out.parent.exists() else None))
    dropped: dict[str, str] = {}
    kept: list[str] = []
    try:
        for kind, task_seed in pairs:
            task = TaskFile.model_validate(synthesize(kind, task_seed))
            dump_task(task, staging / task.id)
        family, tasks = load_suite(str(staging), family="claw")
        try:
            results = validate_tasks(family, tasks, backend=backend, workers=workers, on_task=on_task)
        finally:
            family.close()
        out.mkdir(parents=True, exist_ok=True)
        for result in results:
            if result.valid:
                target = out / result.task_id
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(staging / result.task_id, target)
                kept.append(result.task_id)
            else:
                dropped[result.task_id] = result.reason()
                if say:
                    say(f"dropped {result.task_id}: {result.reason()}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"family": "claw", "out": str(out), "seed": seed, "asked": n, "kept": len(kept), "tasks": kept,
            "templates": sorted({k for k, _ in pairs}), "dropped": dropped}


class ClawSynthesizer(TemplateSynthesizer):
    """`tasks synth --family claw`: seeded personal-assistant tasks, each valid three ways."""

    family = "claw"
    templates = staticmethod(templates)  # type: ignore[assignment]
    describe = staticmethod(describe)  # type: ignore[assignment]
    plan = staticmethod(plan)  # type: ignore[assignment]
    make = staticmethod(synth_validated)  # type: ignore[assignment]

    def summary(self, report: dict[str, Any], request: Any) -> str:
        return f"kept {report['kept']}/{request.n} tasks in {request.out_dir}"
