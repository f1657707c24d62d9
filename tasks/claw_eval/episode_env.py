"""One Claw-Eval episode (seam version 2): what the task needs, its leased services, its evidence.

    requires       declared from the task (the core refuses what the run cannot give, in the
                   family's own words): web_real services need --network full, a grader that
                   calls a judge --judge-model, files missing from the checkout are needs_data,
                   a multi-turn task a simulated user
    spec           the task's services leased (services.py: started from their command lines,
                   ready by their health checks); the sandbox gets no port forward (tools only)
    setup          services reset; sandbox_files (and prompt attachments) placed in the workspace,
                   found where Claw-Eval's runner finds them (fixtures.py: the task folder, then
                   the checkout root)
    tools          the task's tools forwarded to their tool_endpoints (tools.py)
    collect        dispatches, /audit of each service, sandbox_grader_files placed then the
                   env_snapshot commands and files read, the messages rebuilt (grading.py), the
                   harness's shell and file actions as the runner's Bash/Read/Write... (actions.py)
    grade          the task's own grader.py in the checkout's environment: Claw-Eval's score and
                   pass beside orchard's strict verdict
    exit           the service set goes back to the pool (reset by the next episode that takes it)
"""

from __future__ import annotations

import glob as globlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import EnvironmentUnavailable
from orchard_cli.evidence import Evidence
from orchard_cli.family import Requirements, RunOptions, SimulatedUser, Task
from orchard_cli.outcome import Outcome
from orchard_cli.tasks.claw_eval.fixtures import ATTACHMENT, GRADER_WORKSPACE, WORKSPACE, named
from orchard_cli.tasks.kit.leases import LeasedEpisode

if TYPE_CHECKING:
    from orchard_cli.tasks.claw_eval.family import ClawEvalFamily

NETWORK_SERVICES = ("web_real",)
"""Service names (prefixes) that reach the live web (a paid search key): needs_network."""
SNAPSHOT_FILE_LIMIT = 2 * 1024 * 1024
USER_MARK = "[user_agent]\n"
SHIM_DIR = "/tmp/orchard-claw-eval/bin"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON_SHIM = ('#!/bin/sh\n# `python` for Claw-Eval\'s commands: the image\'s own, else its python3\n'
               'for p in /usr/local/bin/python /usr/bin/python; do [ -x "$p" ] && exec "$p" "$@"; done\n'
               'exec python3 "$@"\n')
"""Claw-Eval's own sandbox image has a `python`, and its tasks' snapshot commands call it by that
name: written into the sandbox at setup (first on the sandbox's PATH; a file, so no command runs
for it), on every backend."""


def simulated_user(definition: dict[str, Any]) -> SimulatedUser | None:
    """`user_agent` (the multi-turn C* tasks): its persona and rounds; each follow-up reaches the
    agent after a `[user_agent]` line, as in Claw-Eval's own runner (its graders split the
    conversation there)."""
    user = definition.get("user_agent") or {}
    if not user.get("enabled"):
        return None
    return SimulatedUser(persona=user.get("persona") or "", max_rounds=int(user.get("max_rounds", 3)), mark=USER_MARK)


def task_limits(definition: dict[str, Any]) -> dict[str, float]:
    """The task's `environment`: its timeout, and `max_turns` (Claw-Eval's runner makes one model
    call per turn) as both the harness's turn limit and the episode's model calls."""
    environment = definition.get("environment") or {}
    found: dict[str, float] = {}
    if environment.get("timeout_seconds"):
        found["timeout_seconds"] = float(environment["timeout_seconds"])
    if environment.get("max_turns"):
        found["max_turns"] = found["max_calls"] = int(environment["max_turns"])
    return found


def requirements(record: dict[str, Any]) -> Requirements:
    """What the task needs beyond a sandbox, with Claw-Eval's own reasons (the service that
    searches the web, the files missing from the checkout)."""
    definition = record["definition"]
    live = [s["name"] for s in definition.get("services") or () if s["name"].startswith(NETWORK_SERVICES)]
    missing = list(dict.fromkeys(record.get("missing") or ()))  # a file both placed and attached is named once
    reasons = {}
    if live:
        reasons["needs_network"] = f"service {live[0]} searches the live web: run with --network full"
    if missing:
        reasons["needs_data"] = f"missing from the checkout: {', '.join(missing[:5])}"
    return Requirements(network=bool(live), judge=bool(record.get("uses_judge")),
                        user=simulated_user(definition) is not None, missing_data=missing, reasons=reasons)


@contextmanager
def service_errors() -> Iterator[None]:
    """A service that will not start or reset (services.ServiceStartError) is the task's
    environment failing: env_error, as it was on the version-1 seam."""
    from orchard_cli.tasks.claw_eval.services import ServiceStartError

    try:
        yield
    except ServiceStartError as exc:
        raise EnvironmentUnavailable(f"{type(exc).__name__}: {exc}") from exc


class ClawEvalEpisode(LeasedEpisode):
    """One Claw-Eval task: its leased services, its workspace files, its tools, its own grader."""

    family: "ClawEvalFamily"

    def __init__(self, family: "ClawEvalFamily", task: Task, options: RunOptions) -> None:
        super().__init__(family, task, options)
        self.definition: dict[str, Any] = task.record["definition"]
        self.requires = requirements(task.record)
        self.user = simulated_user(self.definition)
        self.limits = task_limits(self.definition)

    def prompt(self, workdir: str) -> str:
        files = [rel for rel, kind in named(self.definition) if kind in (WORKSPACE, ATTACHMENT)]
        lines = [self.definition["prompt"]["text"].strip(), ""]
        if files:
            lines.append(f"Files for this task are in {workdir}: {', '.join(files)}.")
        lines.append("Use your tools. When you are done, reply with your final answer.")
        return "\n".join(lines)

    def spec(self, backend: str) -> SandboxSpec:
        """The task's services leased. Not through `take`: a set that will not start is env_error
        here (the task's environment), as it was before the move, not the kit's infra_error."""
        checkout = self.family.checkout(self.task.record["root"])
        self.give_back()  # a second spec (the grading sandbox's): the first set goes back first
        with service_errors():
            pool = self.family.pool
            self.lease = pool.lease_for(self.definition.get("services") or [], checkout.root, checkout.python(),
                                        checkout.environ())
            self.owned = pool.get(self.lease)
        timeout = int((self.definition.get("environment") or {}).get("timeout_seconds") or 300)
        return SandboxSpec.model_validate({"memory": "2Gi", "timeout": timeout + 900, "labels": self.labels(),
                                           "env": {"PATH": f"{SHIM_DIR}:{SANDBOX_PATH}"}})

    def setup(self, sandbox: SandboxHandle, *, for_grading: bool = False) -> None:
        with service_errors():
            self.owned.reset()
        sandbox.write_file(f"{SHIM_DIR}/python", PYTHON_SHIM, mode=0o755)
        self._place(sandbox, (WORKSPACE, ATTACHMENT))

    def _place(self, sandbox: SandboxHandle, kinds: tuple[str, ...]) -> None:
        """The task's files (or folders) of `kinds` in the workspace at the paths the task names
        them by, found where Claw-Eval's runner finds them (fixtures.py: the task folder, then
        the checkout root) and read through the guarded loader (tasks/kit); a missing one is
        left out, as the runner leaves it."""
        from orchard_cli.tasks.claw_eval.fixtures import roots
        from orchard_cli.tasks.kit.taskfiles import TaskFiles

        root = Path(self.task.record["root"])
        folder = root / "tasks" / self.task.record["folder"]
        for rel, kind in named(self.definition):
            if kind not in kinds:
                continue
            first, *also = roots(kind, folder, root)
            files = TaskFiles(self.task.task_id, first, also=also)
            if not files.exists(rel):
                continue
            for name, _ in files.files(rel):
                sandbox.write_file(f"{sandbox.workdir}/{name}", files.read_bytes(name))

    def tools(self) -> Any:
        from orchard_cli.tasks.claw_eval.tools import session

        if self.owned is None:
            return None
        return self.session_for(lambda: session(self.definition, self.owned))

    def collect(self, solution: Any, sandbox: SandboxHandle | None) -> Evidence:
        from orchard_cli.tasks.claw_eval.actions import sandbox_calls
        from orchard_cli.tasks.claw_eval.grading import messages

        evidence = super().collect(solution, sandbox)  # the tools end, their calls are the dispatches
        if sandbox is None:
            return evidence
        records = solution.agent.records if solution.agent is not None else None
        known = {t["name"] for t in self.definition.get("tools") or ()}
        rebuilt = messages(self.prompt(sandbox.workdir), records, evidence.dispatches, evidence.answer, known)
        evidence.state = {"audit": self.owned.audit(),
                          "env_snapshot": self.snapshot(sandbox),
                          "sandbox_calls": sandbox_calls(rebuilt, evidence.dispatches, known) if records else [],
                          "messages": rebuilt}
        return evidence

    def snapshot(self, sandbox: SandboxHandle) -> dict[str, Any]:
        """sandbox_grader_files placed (after the agent), then env_snapshot_commands run and
        env_snapshot_files read, keyed as Claw-Eval's runner keys them."""
        import base64

        definition = self.definition
        self._place(sandbox, (GRADER_WORKSPACE,))
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

    def grade(self, evidence: Evidence, sandbox: SandboxHandle | None) -> Outcome | None:
        """The task's own grader, in a sandbox holding the task's services (without one: None, and
        the core makes one, as before the move); a service that failed under it is infra_error."""
        from orchard_cli.tasks.claw_eval import grading

        if sandbox is None:
            return None
        failure = self.failure()
        if failure:
            return Outcome(resolved=False, category="infra_error", error=f"a service failed: {failure}")
        checkout = self.family.checkout(self.task.record["root"])
        return grading.outcome(checkout.grade(grading.request(self.task.record, evidence, self.judge())))

    def judge(self) -> dict[str, Any] | None:
        """The run's `--judge-model` as the checkout's graders call it ({model, base_url,
        api_key}: the key from the judge's key variable, else OPENAI_API_KEY, passed to the
        grader's process only), or None."""
        import os

        from orchard_cli.models import read_key

        judge = self.options.judge
        if judge is None:
            return None
        key = read_key(judge.key_env) if judge.key_env else os.environ.get("OPENAI_API_KEY")
        return {"model": judge.model, "base_url": judge.base_url, "api_key": key}
