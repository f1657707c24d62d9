"""A task's content, apart from its id: what the agent is shown (the prompt) and the world it acts
on (the fixture). Two tasks with the same content are the same task to a model, whatever their
ids: held-out sets are kept disjoint from training sets by content (`orchard recipe`), and the
contamination guard of `orchard train --eval-suite` compares content as well as ids (trajectories
carry their task's content key in `metadata.task_content`).

The fixture is read from the task record's world fields: claw `services`, `workspace`, `now`;
web `fixture`, `start`, `sites`; MiniWoB `name` and `seed`; SWE `repo`, `base_commit`. Reference
fields (gold, near miss, checks, limits) and labels (category, difficulty) are not content.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchard_cli.tasks.base import Task

FIXTURE_FIELDS = ("services", "workspace", "attachments", "now", "fixture", "start", "sites", "name", "seed",
                  "repo", "base_commit", "environment_setup_commit")
CONTENT_KEY = "task_content"
"""The trajectory metadata field holding the content key."""


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:24]


def fixture_of(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in FIXTURE_FIELDS if k in record}


def content_key(task: "Task") -> str:
    """sha256 (24 hex) of the prompt and the fixture."""
    return _sha({"prompt": " ".join(task.problem_statement.split()),
                 "fixture": _sha(fixture_of(task.record or {}))})


def overlap(tasks: list["Task"], others: list["Task"]) -> dict[str, str]:
    """Task id of `tasks` -> the id of a task of `others` with the same content."""
    seen: dict[str, str] = {}
    for other in others:
        seen.setdefault(content_key(other), other.task_id)
    return {t.task_id: seen[k] for t in tasks if (k := content_key(t)) in seen}
