"""Claw-Eval, as published, from a checkout the user names (`orchard eval claw-eval --dataset PATH`).

    load           every tasks/<ID>/task.yaml through the checkout's own TaskDefinition (in the
                   checkout's environment, checkout.py); the core selects
    groups         its category, and its kind by the id's letter (general, multimodal, multi_turn)
    episode        one task's episode (episode_env.py): what it requires, its leased services, its
                   tools, its evidence, its grade by the task's own grader.py
    close          the run's service sets and the checkouts' warm grading helpers stop
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from orchard_cli.errors import UsageError
from orchard_cli.family import RunOptions, Source, Suite, SuiteInfo, Task
from orchard_cli.outcome import CategoryInfo
from orchard_cli.tasks.claw_eval.episode_env import ClawEvalEpisode
from orchard_cli.tasks.kit.leases import LeasedFamily

LEASE_LABEL = "orchard.claw-eval.lease"
KINDS = {"T": "general", "M": "multimodal", "C": "multi_turn"}


class ClawEvalFamily(LeasedFamily):
    name = "claw-eval"
    grading = "in_place"
    categories = {"unsafe": CategoryInfo(label="unsafe", color="#d9480f")}
    requirement_labels = {
        "needs_judge": CategoryInfo(label="needs a judge (--judge-model)", color="#c7a4e0"),
        "needs_network": CategoryInfo(label="needs the live web", color="#a4c4e0"),
        "needs_user": CategoryInfo(label="needs a simulated user", color="#e0cfa4"),
        "needs_data": CategoryInfo(label="fixtures missing", color="#b0b0b0"),
    }
    """Its own labels for the core's requirement categories (what its scorecards showed before
    version 2)."""
    suites = (SuiteInfo("claw-eval", "claw-eval", "",
                        "Claw-Eval tasks from a checkout you name (--dataset PATH/TO/claw-eval)"),)

    lease_label = LEASE_LABEL
    benchmark = "Claw-Eval"
    """Its attempts carry Claw-Eval's own verdict (`tests.benchmark_passed`): the scorecard leads with it."""
    error_retries = 2
    """An attempt lost to an env/infra error runs again up to twice in the run, as Claw-Eval's
    runner retries a task (3 tries) and continues a batch until each task has its graded trials:
    its Pass^3 is over 3 graded attempts. `--retry-errors 0` counts such an attempt as not passed."""

    def __init__(self) -> None:
        super().__init__()
        self._checkouts: dict[str, Any] = {}
        """Checkout root -> its Checkout (environment, warm grading helper), for the run."""
        self._lock = threading.Lock()

    def new_pool(self) -> Any:
        from orchard_cli.tasks.claw_eval.services import ServicePool

        return ServicePool()

    def close(self, *, interrupted: bool = False) -> None:
        """The run is over: its service sets and the checkouts' warm grading helpers stop. (Stopping:
        the sets stop, new leases are refused; graders still running finish.)"""
        super().close(interrupted=interrupted)
        if interrupted:
            return
        with self._lock:
            checkouts = list(self._checkouts.values())
        for checkout in checkouts:
            checkout.close()

    # ---- tasks -------------------------------------------------------------------------------
    def checkout(self, root: str) -> Any:
        from orchard_cli.tasks.claw_eval.checkout import Checkout

        with self._lock:
            found = self._checkouts.get(root)
            if found is None:
                found = self._checkouts[root] = Checkout(root)
            return found

    def load(self, info: SuiteInfo, source: Source) -> Suite:
        """Every task of the checkout (`--dataset`), through its own task model."""
        where = source.dataset or info.source
        if not where:
            raise UsageError("claw-eval needs a checkout: --dataset PATH/TO/claw-eval",
                             hint="git clone https://github.com/claw-eval/claw-eval, then "
                                  "orchard eval claw-eval --dataset claw-eval")
        if not Path(where).expanduser().is_dir():
            raise UsageError(f"{where}: not a folder (a Claw-Eval checkout)")
        checkout = self.checkout(str(Path(where).expanduser().resolve()))
        found = checkout.helper("load")
        if found.get("refused"):  # the guard on task files (tasks/kit): the run stops here, whole
            from orchard_cli.tasks.kit.taskfiles import HINT, TaskDataError

            first = found["refused"][0]
            more = f" (and {len(found['refused']) - 1} more)" if len(found["refused"]) > 1 else ""
            raise TaskDataError(f"task {first['folder']}: {first['path']}: {first['why']}{more}", hint=HINT)
        tasks = [Task(task_id=item["definition"]["task_id"], suite=info.name, family=self.name,
                      problem_statement=item["definition"]["prompt"]["text"], record={**item, "root": str(checkout.root)})
                 for item in found["tasks"]]
        provenance = {"checkout": str(checkout.root), "commit": checkout.commit(),
                      "environment_lock": str(checkout.lock_file()), "tasks_found": len(tasks),
                      "load_problems": found["problems"]}
        return Suite(info=info, tasks=tasks, provenance=provenance)

    def groups(self, task: Task) -> dict[str, str]:
        definition = task.record["definition"]
        return {"category": definition.get("category") or "none",
                "kind": KINDS.get(task.task_id[:1], "other")}

    def describe(self, task: Task) -> dict[str, Any]:
        """The task's fields; `blocked`: what stops it in a run without --network full, a judge or
        a simulated user's harness (the core's verdict, in Claw-Eval's words)."""
        definition = task.record["definition"]
        episode = self.episode(task, RunOptions())
        blocked = episode.requires.unmet(RunOptions(), talks_to_users=True)
        return {"instance_id": task.task_id, "suite": task.suite, "family": self.name,
                "category": definition.get("category"), "difficulty": definition.get("difficulty"),
                "prompt": definition["prompt"]["text"], "tools": [t["name"] for t in definition.get("tools") or ()],
                "services": [s["name"] for s in definition.get("services") or ()],
                "judge_rubric": definition.get("judge_rubric") or None, "uses_judge": task.record["uses_judge"],
                "simulated_user": episode.user is not None,
                "blocked": f"{blocked.category}: {blocked}" if blocked else None}

    def episode(self, task: Task, options: RunOptions) -> ClawEvalEpisode:
        return ClawEvalEpisode(self, task, options)
