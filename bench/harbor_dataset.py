"""The real-dataset table of docs/harbor.md: how many tasks of a Harbor dataset (a folder of task
folders, kept outside the repository) load, are refused by name, build offline as they are, build
with `--image-map` onto orchard's base image, and validate (gold passes, null fails), with the
causes of the rest.

    python bench/harbor_dataset.py /tmp/terminal-bench-2 [--map-to orchard/base:bookworm] [--workers 2] [--no-validate]

Each stage is orchard's own code path (the guarded loader, the family's refusals, the image
builder, `tasks validate`'s solvers); the table goes to stdout as Markdown, the per-task rows to
--json FILE.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--map-to", default="orchard/base:bookworm")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-validate", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from orchard_cli.errors import OrchardError
    from orchard_cli.tasks.harbor.environment import NeedsImage, base_images, image_for
    from orchard_cli.tasks.harbor.taskfile import load_task_dir, task_folders

    rows: dict[str, dict] = {}
    loaded = []
    for folder in task_folders(args.folder):
        row = rows.setdefault(folder.name, {"task": folder.name})
        try:
            task = load_task_dir(folder)
        except OrchardError as exc:
            row["load"] = "fails: " + exc.message.replace(str(folder), "").strip(" :")
            continue
        row["load"] = "ok"
        refusal = task.refusal()
        if refusal:
            row["refused"] = refusal[1]
            continue
        loaded.append(task)
        for name, mapping in (("as_is", {}), ("mapped", None)):
            if mapping is None:
                bases = base_images(task.dockerfile or "") or [task.config.environment.docker_image or ""]
                mapping = {b: args.map_to for b in bases if b and b != args.map_to}
                if task.config.environment.docker_image and task.dockerfile:
                    mapping.pop(task.config.environment.docker_image, None)  # the Dockerfile builds it
            try:
                row[name] = f"ok {image_for(task, mapping) if task.dockerfile or mapping == {} else 'prebuilt'}"
            except NeedsImage as exc:
                row[name] = f"needs_image {exc.image}"
            except OrchardError as exc:
                row[name] = "build fails: " + " ".join(exc.message.split())[:160]
        row["image_map"] = mapping
    if not args.no_validate:
        validate(args, loaded, rows)
    table(rows)
    if args.json:
        args.json.write_text(json.dumps(list(rows.values()), indent=1))
    return 0


def validate(args, tasks, rows) -> None:
    from orchard_cli.families import open_suite
    from orchard_cli.selection import TaskSelection
    from orchard_cli.tasks.validate import validate_tasks

    by_map = collections.defaultdict(list)
    for task in tasks:
        if rows[task.id].get("mapped", "").startswith("ok") and task.has_solution:
            by_map[json.dumps(rows[task.id]["image_map"], sort_keys=True)].append(task.id)
        elif not task.has_solution:
            rows[task.id]["validate"] = "no solution/solve.sh"
    for mapping, ids in by_map.items():
        selection = TaskSelection(suite=str(args.folder), family="harbor", instances=ids, image_map=json.loads(mapping))
        family, suite = open_suite(selection)
        chosen = suite.tasks
        for result in validate_tasks(family, chosen, backend="docker", workers=args.workers):
            gold, null = result.verdicts[0], result.verdicts[1]
            rows[result.task_id]["validate"] = ("valid" if gold.ok and null.ok else
                                                "; ".join(f"{v.way} {v.category}" + (f" ({v.error[:120]})" if v.error else "")
                                                          for v in (gold, null) if not v.ok))


def table(rows) -> None:
    values = list(rows.values())
    count = lambda key, test: sum(1 for r in values if test(r.get(key, "")))  # noqa: E731
    print(f"| stage | tasks |\n| --- | --- |\n| task folders | {len(values)} |")
    print(f"| load | {count('load', lambda v: v == 'ok')} |")
    print(f"| refused by name (unsupported) | {sum(1 for r in values if r.get('refused'))} |")
    print(f"| build offline as they are | {count('as_is', lambda v: v.startswith('ok'))} |")
    print(f"| build with --image-map onto the base | {count('mapped', lambda v: v.startswith('ok'))} |")
    print(f"| validate (gold passes, null fails) | {count('validate', lambda v: v == 'valid')} |")
    causes = collections.Counter()
    for r in values:
        for key in ("load", "refused", "as_is", "mapped", "validate"):
            value = r.get(key)
            if value and value != "ok" and not value.startswith("ok ") and value != "valid":
                causes[f"{key}: {value[:90]}"] += 1
    print("\n| cause | tasks |\n| --- | --- |")
    for cause, n in causes.most_common():
        print(f"| {cause} | {n} |")


if __name__ == "__main__":
    sys.exit(main())
