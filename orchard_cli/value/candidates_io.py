"""Candidate sets as predictions files: `orchard rerank candidates SUITE --out DIR`.

Each task's candidates (variants.py) are shuffled over N slots with a seeded draw, and slot K is
written as DIR/candidates-K.jsonl (SWE-bench predictions). Grading slot K with `orchard eval
SUITE --predictions DIR/candidates-K.jsonl` makes run K; `orchard rerank apply --runs RUN_1 ...
RUN_N` then sees, per task, N candidates in an order that does not give the gold patch away.
A task with fewer candidates than N has no line in the remaining files (eval grades that as an
empty patch). DIR/kinds.json records which kind sits in which slot, for analysis only.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchard_cli.errors import UsageError

NAME = "orchard-candidates"


def write_candidates(suite: str, out: Path, *, instances: list[str] | None = None, limit: int | None = None,
                     dataset: str | None = None, near_misses: int = 2, seed: int = 0,
                     say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    from orchard_cli.runs.predictions import Prediction
    from orchard_cli.records import write_json, write_text
    from orchard_cli.families import load_suite
    from orchard_cli.value.variants import candidates

    if out.exists() and any(out.iterdir()):
        raise UsageError(f"output folder {out} is not empty", hint="choose a new --out folder")
    family, tasks = load_suite(suite, dataset=dataset, instances=instances, limit=limit)
    if not tasks:
        raise UsageError(f"no tasks selected from {suite}")
    sets: dict[str, list[Any]] = {}
    for n, task in enumerate(tasks, start=1):
        sets[task.task_id] = candidates(task, family, seed=seed, near_misses=near_misses)
        say(f"[{n}/{len(tasks)}] {task.task_id}: {', '.join(c.kind for c in sets[task.task_id])}")
    slots = max(len(c) for c in sets.values())
    files: list[list[str]] = [[] for _ in range(slots)]
    kinds: dict[str, list[str]] = {}
    for task_id, cands in sets.items():
        order = list(range(len(cands)))
        random.Random(f"slots:{seed}:{task_id}").shuffle(order)
        kinds[task_id] = [cands[i].kind for i in order]
        for slot, i in enumerate(order):
            record = Prediction(instance_id=task_id, model_name_or_path=NAME, model_patch=cands[i].patch)
            files[slot].append(json.dumps(record.swebench_record(), ensure_ascii=False) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    for slot, lines in enumerate(files, start=1):
        write_text(out / f"candidates-{slot}.jsonl", "".join(lines))
    write_json(out / "kinds.json", {"schema_version": 1, "suite": suite, "seed": seed, "slots": kinds})
    counted = Counter(kind for ks in kinds.values() for kind in ks)
    return {"tasks": len(sets), "files": slots, "out": str(out), "kinds": dict(sorted(counted.items()))}


def pick_tasks(tasks: list[Any], n: int, repos: int = 3) -> list[str]:
    """n task ids, round robin over the `repos` repositories whose test suites are smallest
    (grading runs a task's whole suite: the smaller, the faster)."""
    by_repo: dict[str, list[Any]] = {}
    for t in sorted(tasks, key=lambda t: t.task_id):
        by_repo.setdefault(t.repo, []).append(t)
    size = {repo: max(len(t.record.get("PASS_TO_PASS", [])) + len(t.record.get("FAIL_TO_PASS", []))
                      for t in ts) for repo, ts in by_repo.items()}
    light = sorted(by_repo, key=lambda repo: (size[repo], repo))[:max(1, repos)]
    queues = {repo: [t.task_id for t in by_repo[repo]] for repo in light}
    chosen: list[str] = []
    while len(chosen) < n and any(queues.values()):
        for repo in light:
            if queues[repo] and len(chosen) < n:
                chosen.append(queues[repo].pop(0))
    return chosen
