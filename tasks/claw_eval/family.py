"""Claw-Eval, as published, from a checkout the user names (`orchard eval claw-eval --dataset PATH`).

    load           every tasks/<ID>/task.yaml through the checkout's own TaskDefinition (in the
                   checkout's environment, checkout.py), filtered like any suite
    sandbox_spec   a task that cannot run as asked stops here, before any agent runs, as
                   needs_data / needs_network / needs_judge (needs_user: the rollout core, for a
                   multi-turn task without --user-model); else the task's
                   services are leased (services.py: started from their command lines, ready by
                   their health checks); the sandbox gets no port forward (tools only)
    setup          services reset; sandbox_files (and prompt attachments) placed in the workspace,
                   found where Claw-Eval's runner finds them (fixtures.py: the task folder, then
                   the checkout root)
    tools          the task's tools forwarded to their tool_endpoints (tools.py)
    collect        dispatches, /audit of each service, sandbox_grader_files placed then the
                   env_snapshot commands and files read, the messages rebuilt (grading.py), the
                   harness's shell and file actions as the runner's Bash/Read/Write... (actions.py)
    grade          the task's own grader.py in the checkout's environment: Claw-Eval's score and
                   pass beside orchard's strict verdict
"""

from __future__ import annotations

import glob as globlib
from pathlib import Path
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.outcome import CategoryInfo, Outcome
from orchard_cli.rollout.failures import EpisodeFailure
from orchard_cli.tasks.base import SimulatedUser, SuiteInfo, Task, TaskSelection
from orchard_cli.tasks.claw_eval.fixtures import ATTACHMENT, GRADER_WORKSPACE, WORKSPACE, named
from orchard_cli.tasks.claw_eval.services import ServiceStartError
from orchard_cli.tasks.leased import LeasedFamily

LEASE_LABEL = "orchard.claw-eval.lease"
NETWORK_SERVICES = ("web_real",)
"""Service names (prefixes) that reach the live web (a paid search key): needs_network."""
SNAPSHOT_FILE_LIMIT = 2 * 1024 * 1024
KINDS = {"T": "general", "M": "multimodal", "C": "multi_turn"}
USER_MARK = "[user_agent]\n"


SHIM_DIR = "/tmp/orchard-claw-eval/bin"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON_SHIM = ('#!/bin/sh\n# `python` for Claw-Eval\'s commands: the image\'s own, else its python3\n'
               'for p in /usr/local/bin/python /usr/bin/python; do [ -x "$p" ] && exec "$p" "$@"; done\n'
               'exec python3 "$@"\n')
"""Claw-Eval's own sandbox image has a `python`, and its tasks' snapshot commands call it by that
name: written into the sandbox at setup (first on the sandbox's PATH; a file, so no command runs
for it), on every backend."""


class ClawEvalFamily(LeasedFamily):
    name = "claw-eval"
    grading = "in_place"
    environment_error = (ServiceStartError,)
    categories = {
        "unsafe": CategoryInfo(label="unsafe", color="#d9480f"),
        "needs_judge": CategoryInfo(label="needs a judge (--judge-model)", color="#c7a4e0"),
        "needs_network": CategoryInfo(label="needs the live web", color="#a4c4e0"),
        "needs_user": CategoryInfo(label="needs a simulated user", color="#e0cfa4"),
        "needs_data": CategoryInfo(label="fixtures missing", color="#b0b0b0"),
    }
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
        self._provenance: dict[str, Any] = {}
        self.network = "none"
        """The run's `--network` (from load's selection): web_real services run only with 'full'."""
        self.judge: dict[str, Any] | None = None
        """{model, base_url, api_key}: graders that call a judge run with the checkout's LLMJudge."""

    def use_judge(self, judge: Any) -> None:
        """The run's `--judge-model`: the checkout's graders call it (its key from the judge's
        key variable, else OPENAI_API_KEY, passed to the grader's process only)."""
        import os

        from orchard_cli.models import read_key

        key = read_key(judge.key_env) if judge.key_env else os.environ.get("OPENAI_API_KEY")
        self.judge = {"model": judge.model, "base_url": judge.base_url, "api_key": key}

    def close(self) -> None:
        """The run is over: its service sets and the checkouts' warm grading helpers stop."""
        super().close()
        with self._lock:
            checkouts = list(self._checkouts.values())
        for checkout in checkouts:
            checkout.close()

    def new_pool(self) -> Any:
        from orchard_cli.tasks.claw_eval.services import ServicePool

        return ServicePool()

    # ---- tasks -------------------------------------------------------------------------------
    def checkout(self, root: str) -> Any:
        from orchard_cli.tasks.claw_eval.checkout import Checkout

        with self._lock:
            found = self._checkouts.get(root)
            if found is None:
                found = self._checkouts[root] = Checkout(root)
            return found

    def load(self, selection: TaskSelection, suite: SuiteInfo) -> list[Task]:
        from orchard_cli.tasks.swe.dataset import select

        source = selection.dataset or suite.source
        if not source:
            raise UsageError("claw-eval needs a checkout: --dataset PATH/TO/claw-eval",
                             hint="git clone https://github.com/claw-eval/claw-eval, then "
                                  "orchard eval claw-eval --dataset claw-eval")
        if not Path(source).expanduser().is_dir():
            raise UsageError(f"{source}: not a folder (a Claw-Eval checkout)")
        checkout = self.checkout(str(Path(source).expanduser().resolve()))
        self.network = selection.network
        found = checkout.helper("load")
        if found.get("refused"):  # the guard on task files (tasks/kit): the run stops here, whole
            from orchard_cli.tasks.kit.taskfiles import HINT, TaskDataError

            first = found["refused"][0]
            more = f" (and {len(found['refused']) - 1} more)" if len(found["refused"]) > 1 else ""
            raise TaskDataError(f"task {first['folder']}: {first['path']}: {first['why']}{more}", hint=HINT)
        rows, by_id = [], {}
        for item in found["tasks"]:
            definition = item["definition"]
            by_id[definition["task_id"]] = {**item, "root": str(checkout.root)}
            rows.append({"instance_id": definition["task_id"], "repo": f"claw-eval/{definition.get('category') or 'none'}"})
        self._provenance = {"checkout": str(checkout.root), "commit": checkout.commit(),
                            "environment_lock": str(checkout.lock_file()), "tasks_found": len(rows),
                            "load_problems": found["problems"]}
        chosen = select(rows, **{k if k != "slice" else "slice_": v for k, v in selection.filters().items()})
        return [Task(task_id=r["instance_id"], suite=suite.name, family=self.name,
                     problem_statement=by_id[r["instance_id"]]["definition"]["prompt"]["text"],
                     record=by_id[r["instance_id"]]) for r in chosen]

    def provenance(self) -> dict[str, Any]:
        return dict(self._provenance)

    def groups(self, task: Task) -> dict[str, str]:
        definition = task.record["definition"]
        return {"category": definition.get("category") or "none",
                "kind": KINDS.get(task.task_id[:1], "other")}

    def describe(self, task: Task) -> dict[str, Any]:
        definition = task.record["definition"]
        blocked = self.blocker(task)
        return {"instance_id": task.task_id, "suite": task.suite, "family": self.name,
                "category": definition.get("category"), "difficulty": definition.get("difficulty"),
                "prompt": definition["prompt"]["text"], "tools": [t["name"] for t in definition.get("tools") or ()],
                "services": [s["name"] for s in definition.get("services") or ()],
                "judge_rubric": definition.get("judge_rubric") or None, "uses_judge": task.record["uses_judge"],
                "simulated_user": self.simulated_user(task) is not None,
                "blocked": f"{blocked[0]}: {blocked[1]}" if blocked else None}

    def blocker(self, task: Task) -> tuple[str, str] | None:
        """(category, reason) when the task cannot run as asked here, else None."""
        record, definition = task.record, task.record["definition"]
        live = [s["name"] for s in definition.get("services") or () if s["name"].startswith(NETWORK_SERVICES)]
        if live and self.network != "full":
            return "needs_network", f"service {live[0]} searches the live web: run with --network full"
        if record.get("missing"):
            missing = list(dict.fromkeys(record["missing"]))  # a file both placed and attached is named once
            return "needs_data", f"missing from the checkout: {', '.join(missing[:5])}"
        if record.get("uses_judge") and self.judge is None:
            return "needs_judge", "its grader calls an LLM judge: give --judge-model and --judge-base-url"
        return None

    def simulated_user(self, task: Task) -> SimulatedUser | None:
        """`user_agent` (the multi-turn C* tasks): its persona and rounds; each follow-up reaches the
        agent after a `[user_agent]` line, as in Claw-Eval's own runner (its graders split the
        conversation there)."""
        user = task.record["definition"].get("user_agent") or {}
        if not user.get("enabled"):
            return None
        return SimulatedUser(persona=user.get("persona") or "", max_rounds=int(user.get("max_rounds", 3)),
                             mark=USER_MARK)

    def limits(self, task: Task) -> dict[str, float]:
        """The task's `environment`: its timeout, and `max_turns` (Claw-Eval's runner makes one
        model call per turn) as both the harness's turn limit and the episode's model calls."""
        environment = task.record["definition"].get("environment") or {}
        found: dict[str, float] = {}
        if environment.get("timeout_seconds"):
            found["timeout_seconds"] = float(environment["timeout_seconds"])
        if environment.get("max_turns"):
            found["max_turns"] = found["max_calls"] = int(environment["max_turns"])
        return found

    # ---- the episode -------------------------------------------------------------------------
    def prompt(self, task: Task, workdir: str) -> str:
        definition = task.record["definition"]
        files = [rel for rel, kind in named(definition) if kind in (WORKSPACE, ATTACHMENT)]
        lines = [definition["prompt"]["text"].strip(), ""]
        if files:
            lines.append(f"Files for this task are in {workdir}: {', '.join(files)}.")
        lines.append("Use your tools. When you are done, reply with your final answer.")
        return "\n".join(lines)

    def sandbox_spec(self, task: Task, backend: str) -> SandboxSpec:
        blocked = self.blocker(task)
        if blocked:
            raise EpisodeFailure(*blocked)
        checkout = self.checkout(task.record["root"])
        definition = task.record["definition"]
        lease = self.pool.lease_for(definition.get("services") or [], checkout.root, checkout.python(), checkout.environ())
        timeout = int((definition.get("environment") or {}).get("timeout_seconds") or 300)
        return SandboxSpec.model_validate({"memory": "2Gi", "timeout": timeout + 900, "labels": self.labels(lease),
                                           "env": {"PATH": f"{SHIM_DIR}:{SANDBOX_PATH}"}})

    def _place(self, task: Task, sandbox: SandboxHandle, kinds: tuple[str, ...]) -> None:
        """The task's files (or folders) of `kinds` in the workspace at the paths the task names
        them by, found where Claw-Eval's runner finds them (fixtures.py: the task folder, then
        the checkout root) and read through the guarded loader (tasks/kit); a missing one is
        left out, as the runner leaves it."""
        from orchard_cli.tasks.claw_eval.fixtures import named, roots
        from orchard_cli.tasks.kit.taskfiles import TaskFiles

        root = Path(task.record["root"])
        folder = root / "tasks" / task.record["folder"]
        for rel, kind in named(task.record["definition"]):
            if kind not in kinds:
                continue
            first, *also = roots(kind, folder, root)
            files = TaskFiles(task.task_id, first, also=also)
            if not files.exists(rel):
                continue
            for name, _ in files.files(rel):
                sandbox.write_file(f"{sandbox.workdir}/{name}", files.read_bytes(name))

    def setup(self, task: Task, sandbox: SandboxHandle) -> None:
        _, services = self.live(sandbox)
        services.reset()
        sandbox.write_file(f"{SHIM_DIR}/python", PYTHON_SHIM, mode=0o755)
        self._place(task, sandbox, (WORKSPACE, ATTACHMENT))

    def tools(self, task: Task, sandbox: SandboxHandle) -> Any:
        from orchard_cli.tasks.claw_eval.tools import session

        live, services = self.live(sandbox)
        return self.session_for(live, lambda: session(task.record["definition"], services))

    def collect(self, task: Task, sandbox: SandboxHandle | None, solution: Any, baseline: Any) -> Evidence:
        from orchard_cli.tasks.claw_eval.actions import sandbox_calls
        from orchard_cli.tasks.claw_eval.grading import messages

        evidence = super().collect(task, sandbox, solution, baseline)
        if sandbox is None:
            return evidence
        live, services = self.live(sandbox)
        definition = task.record["definition"]
        self.end_tools(live)
        if live.session is not None:
            evidence.dispatches = live.session.dispatches
        records = solution.agent.records if solution.agent is not None else None
        known = {t["name"] for t in definition.get("tools") or ()}
        rebuilt = messages(self.prompt(task, sandbox.workdir), records, evidence.dispatches, evidence.answer, known)
        evidence.state = {"audit": services.audit(),
                          "env_snapshot": self.snapshot(task, sandbox),
                          "sandbox_calls": sandbox_calls(rebuilt, evidence.dispatches, known) if records else [],
                          "messages": rebuilt}
        return evidence

    def snapshot(self, task: Task, sandbox: SandboxHandle) -> dict[str, Any]:
        """sandbox_grader_files placed (after the agent), then env_snapshot_commands run and
        env_snapshot_files read, keyed as Claw-Eval's runner keys them."""
        import base64

        definition = task.record["definition"]
        self._place(task, sandbox, (GRADER_WORKSPACE,))
        timeout = float((definition.get("environment") or {}).get("env_snapshot_timeout") or 10)
        found: dict[str, Any] = {}
        for command in definition.get("env_snapshot_commands") or ():
            job = sandbox.exec(["bash", "-c", command], timeout=timeout, cwd=sandbox.workdir)
            found[f"cmd:{command}"] = {"exit_code": job.exit_code if job.exit_code is not None else -1,
                                       "stdout": job.stdout, "stderr": job.stderr}
        for pattern in definition.get("env_snapshot_files") or ():
            paths = [pattern]
            if globlib.has_magic(pattern):
                job = sandbox.exec(["bash", "-c", f"shopt -s nullglob globstar; for f in {pattern}; do echo \"$f\"; done | head -50"],
                                   timeout=timeout, cwd=sandbox.workdir)
                paths = [p for p in job.stdout.splitlines() if p]
            for path in paths:
                try:
                    data = sandbox.read_file(path)[:SNAPSHOT_FILE_LIMIT]
                except Exception as exc:  # noqa: BLE001 - recorded as Claw-Eval records it
                    found[f"file:{path}"] = {"error": f"{type(exc).__name__}: {exc}"}
                    continue
                try:
                    found[f"file:{path}"] = {"content": data.decode("utf-8"), "encoding": "utf-8"}
                except UnicodeDecodeError:
                    found[f"file:{path}"] = {"content": base64.b64encode(data).decode(), "encoding": "base64"}
        return found

    def grade(self, task: Task, evidence: Evidence, sandbox: SandboxHandle) -> Outcome:
        from orchard_cli.tasks.claw_eval import grading

        if sandbox is not None and self.leased(sandbox):
            live, services = self.live(sandbox)
            failure = services.failed() or (live.session.failure if live.session is not None else None)
            if failure:
                return Outcome(resolved=False, category="infra_error", error=f"a service failed: {failure}")
        checkout = self.checkout(task.record["root"])
        result = checkout.grade(grading.request(task.record, evidence, self.judge))
        return grading.outcome(result)

