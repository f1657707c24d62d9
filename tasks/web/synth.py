"""`orchard tasks synth --family web`: web-mini tasks made offline, deterministic by seed, over
the four local sites (shop, wiki, mail, booking). Each template (synth_shop, synth_wiki,
synth_mail, synth_booking) draws its parameters once and builds the fixture, the prompt, the
checks, the gold steps and a near miss from the same draw and the same seeded data the apps
build, so the checks always fit the sites.

    generate(n, seed)            n task dicts (task.yaml's format), round-robin over the sites,
                                 and over each site's templates
    write_suite(out_dir, n, seed)   the same, written as <out_dir>/<id>/task.yaml
    synth_validated(out_dir, n, seed)   written only when valid three ways (tasks/validate.py:
                                 the gold passes, a null run and the near miss fail), as
                                 `orchard tasks synth --family web` does

The bundled suite is `generate(SUITE_SIZE, SUITE_SEED)`:
    orchard tasks synth --family web --n 44 --seed 7 --out-dir tasks/data/web-mini
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from orchard_cli.tasks.web import synth_booking, synth_mail, synth_shop, synth_wiki  # noqa: F401 - they register
from orchard_cli.synthesis import TemplateSynthesizer
from orchard_cli.tasks.web.synth_kit import TEMPLATES, Draw, Unfit

SITES = ("shop", "wiki", "mail", "booking")
SUITE_SEED = 7
SUITE_SIZE = 44
TRIES = 20
MAX_PER_SEED = 1000
"""Task seeds are seed*1000 + i: more tasks per seed would reach the next seed's."""
LIMITS = {"easy": {"timeout_seconds": 300, "max_turns": 20}, "medium": {"timeout_seconds": 300, "max_turns": 30},
          "hard": {"timeout_seconds": 600, "max_turns": 40}}


def templates(site: str | None = None) -> list[str]:
    return sorted(name for name, (where, _) in TEMPLATES.items() if site is None or where == site)


def describe() -> list[dict[str, str]]:
    """Each template with its site, category and difficulty (`tasks synth --family web --list`)."""
    rows = []
    for name in templates():
        site, build = TEMPLATES[name]
        rows.append({"template": name, "site": site, **_kind(name)})
    return rows


def _kind(name: str) -> dict[str, str]:
    task = synthesize(name, 0)
    return {"category": task["category"], "difficulty": task["difficulty"], "prompt": task["prompt"]}


def plan(n: int, seed: int, chosen: list[str] | None = None) -> list[tuple[str, int]]:
    """n (template, task seed) pairs: the sites in turn (those with a chosen template), each
    site's chosen templates in turn; task seeds are seed*1000 + i."""
    from orchard_cli.errors import UsageError

    if n > MAX_PER_SEED:
        raise UsageError(f"--n {n}: at most {MAX_PER_SEED} tasks per seed (task seeds are seed*1000+i)")
    allowed = set(chosen or templates())
    sites = [site for site in SITES if any(t in allowed for t in templates(site))]
    out = []
    for i in range(n):
        names = [t for t in templates(sites[i % len(sites)]) if t in allowed]
        out.append((names[(i // len(sites)) % len(names)], seed * 1000 + i))
    return out


def synthesize(name: str, seed: int) -> dict[str, Any]:
    """One task from template `name`; a draw that cannot make it moves on to the next world seed."""
    site, build = TEMPLATES[name]
    for attempt in range(TRIES):
        world = seed + attempt * 1_000_000
        try:
            body = build(Draw(world))
        except Unfit:
            continue
        return _task(f"{name}-{world}", site, body)
    raise RuntimeError(f"template {name} found no fitting draw from seed {seed} in {TRIES} tries")


def _task(task_id: str, site: str, body: dict[str, Any]) -> dict[str, Any]:
    sites = body.get("sites") or [site]
    return {"id": task_id, "site": site, "category": body["category"], "difficulty": body["difficulty"],
            "prompt": body["prompt"], "start": {"site": site, "path": body.get("start", "/")}, "sites": sites,
            "fixture": body["fixture"], "limits": dict(LIMITS[body["difficulty"]]), "checks": body["checks"],
            "gold": body["gold"], "near_miss": body["near_miss"]}


def generate(n: int, seed: int, chosen: list[str] | None = None) -> list[dict[str, Any]]:
    """n tasks, each checked against the task.yaml model."""
    from orchard_cli.tasks.web.taskfile import WebTask

    tasks = [synthesize(name, task_seed) for name, task_seed in plan(n, seed, chosen)]
    for task in tasks:
        WebTask.model_validate(task)
    return tasks


def dump(task: dict[str, Any]) -> str:
    """task.yaml's text: keys in the model's order, multi-line strings as blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> Any:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(task, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=120)


def write_suite(out_dir: Path, n: int, seed: int, say: Callable[[str], None] | None = None,
                chosen: list[str] | None = None) -> dict[str, Any]:
    """Write n tasks as task folders under out_dir (a task's folder is replaced; others stay)."""
    out_dir = Path(out_dir)
    tasks = generate(n, seed, chosen)
    out_dir.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        folder = out_dir / task["id"]
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (folder / "task.yaml").write_text(dump(task))
        if say:
            say(f"wrote {folder}")
    sites = {site: sum(t["site"] == site for t in tasks) for site in SITES}
    return {"family": "web", "out": str(out_dir), "seed": seed, "tasks": len(tasks), "sites": sites,
            "ids": [t["id"] for t in tasks]}


def synth_validated(out_dir: Path, n: int, seed: int, *, backend: str = "local", workers: int = 1,
                    say: Callable[[str], None] | None = None, chosen: list[str] | None = None,
                    on_task: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """Make n tasks in a staging folder, validate them three ways on real apps and a real browser,
    and copy the valid ones to out_dir; the report names each one dropped and why. `on_task` hears
    each task's validation as it ends."""
    from orchard_cli.tasks.registry import load_suite
    from orchard_cli.tasks.validate import validate_tasks

    out_dir = Path(out_dir)
    parent = out_dir.parent if out_dir.parent.exists() else None
    staging = Path(tempfile.mkdtemp(prefix=".web-synth-", dir=parent))
    try:
        made = write_suite(staging, n, seed, chosen=chosen)
        family, tasks = load_suite(str(staging), family="web")
        try:
            results = validate_tasks(family, tasks, backend=backend, workers=workers, on_task=on_task)
        finally:
            family.close()
        out_dir.mkdir(parents=True, exist_ok=True)
        kept, dropped = [], {}
        for result in results:
            if not result.valid:
                dropped[result.task_id] = result.reason()
                if say:
                    say(f"dropped {result.task_id}: {result.reason()}")
                continue
            target = out_dir / result.task_id
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(staging / result.task_id, target)
            kept.append(result.task_id)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {**made, "out": str(out_dir), "asked": n, "tasks": len(kept), "ids": kept, "dropped": dropped,
            "templates": sorted({name for name, _ in plan(n, seed, chosen)}),
            "sites": {site: sum(i.startswith(site + "-") for i in kept) for site in SITES}}


class WebSynthesizer(TemplateSynthesizer):
    """`tasks synth --family web`: seeded browser tasks on the local sites, each valid three ways."""

    family = "web"
    kept_key = "tasks"
    templates = staticmethod(templates)  # type: ignore[assignment]
    describe = staticmethod(describe)  # type: ignore[assignment]
    plan = staticmethod(plan)  # type: ignore[assignment]
    make = staticmethod(synth_validated)  # type: ignore[assignment]

    def summary(self, report: dict[str, Any], request: Any) -> str:
        sites = ", ".join(f"{site} {count}" for site, count in report["sites"].items())
        return f"kept {report['tasks']}/{request.n} web tasks in {request.out_dir} ({sites})"
