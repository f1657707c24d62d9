"""The web family: browser tasks on local web apps (`web-mini`), graded by programs.

    spec           leases a web set (pool.py): the local apps and a jailed Chromium, started once
                   per worker; the agent's sandbox gets no route to either: it reaches the browser
                   through the task's tools only (actions.py)
    setup          resets the apps to the task's fixture, opens a fresh browser context at the
                   task's start page, allowed only the task's sites
    tools          the action space over that context (one ToolSession per episode)
    collect        the final answer, the apps' request log, the checks' queries, blocked requests,
                   the final URL, the last screenshot and one after each action (files in the
                   episode's log folder: what `orchard judge` shows a vision judge)
    grade          the checks (checks.py), from the evidence; a dead browser or app server is infra_error
    exit           the context closes, the set goes back to the pool (tasks/kit/leases.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.family import Gold, GoldCall, RunOptions, Source, Suite, SuiteInfo, Task
from orchard_cli.outcome import Outcome
from orchard_cli.tasks.kit.browsing import BrowsingEpisode, prompt_text
from orchard_cli.tasks.kit.leases import LeasedFamily, infra_failures
from orchard_cli.tasks.kit.taskfiles import ParsedTasks

LEASE_LABEL = "orchard.web.lease"
DATA = Path(__file__).resolve().parent.parent / "data"


class WebEpisode(BrowsingEpisode):
    """One web task: the local apps reset to its fixture, a fresh browser context at its start page."""

    family: "WebFamily"

    def __init__(self, family: "WebFamily", task: Task, options: RunOptions) -> None:
        super().__init__(family, task, options)
        self.parsed = family.parsed(task)
        self.baseline: dict[str, Any] = {}
        limits = self.parsed.limits
        self.limits = {"timeout_seconds": limits.timeout_seconds, "max_turns": limits.max_turns}
        if limits.max_model_calls:
            self.limits["max_calls"] = limits.max_model_calls

    def prompt(self, workdir: str) -> str:
        return prompt_text(self.parsed.prompt, {site: f"{site}:/" for site in self.parsed.sites})

    def spec(self, backend: str) -> SandboxSpec:
        with infra_failures():
            self.take(self.family.pool.lease_set)
        return SandboxSpec.model_validate({"memory": "2Gi", "timeout": int(self.parsed.limits.timeout_seconds) + 900,
                                           "labels": self.labels()})

    def setup(self, sandbox: SandboxHandle, *, for_grading: bool = False) -> None:
        """The apps reset, a fresh context at the start page. A set that died (browser, apps) is
        infra_error; a fixture the apps refuse is the task's own error (env_error)."""
        from orchard_cli.tasks.kit.browser_session import BrowserSession

        parsed, web = self.parsed, self.owned
        with infra_failures():
            web.apps.reset(parsed.fixture)
            origins = web.apps.origins()
            session = self.browse(BrowserSession(web.browser, {s: origins[s] for s in parsed.sites},
                                                 record_shots=True))
            session.open(parsed.start.url())
        if not for_grading:
            self.baseline = web.apps.snapshot()

    def collect(self, solution: Any, sandbox: SandboxHandle | None) -> Evidence:
        evidence = super().collect(solution, sandbox)
        if sandbox is None:
            return evidence
        session = self.browser_evidence(evidence)
        evidence.state = collect_state(self.owned.apps, self.parsed.checks, session)
        evidence.state["failure"] = self.failure()
        evidence.state_before = self.baseline
        return evidence

    def grade(self, evidence: Evidence, sandbox: SandboxHandle | None) -> Outcome:
        """The whole verdict, from the evidence alone: a regrade needs no browser."""
        return grade(self.parsed.checks, evidence)

    def reference(self, kind: str) -> Gold | None:
        """The gold steps; the near miss: the task's `near_miss` steps, or its gold without the last."""
        parsed = self.parsed
        steps = parsed.gold if kind == "gold" else (parsed.near_miss or parsed.gold[:-1])
        return Gold(tool_calls=[GoldCall(tool=s.tool, arguments=s.arguments) for s in steps])


class WebFamily(ParsedTasks, LeasedFamily):
    name = "web"
    grading = "in_place"
    harness = "web"  # orchard's web agent: accessibility-tree pages, browser actions
    suites = (SuiteInfo("web-mini", "web", str(DATA / "web-mini"),
                        "browser tasks on local web apps: a shop, a wiki, webmail, bookings"),)

    lease_label = LEASE_LABEL

    def new_pool(self) -> Any:
        from orchard_cli.tasks.web.pool import WebPool

        return WebPool()

    def load(self, info: SuiteInfo, source: Source) -> Suite:
        from orchard_cli.tasks.web.taskfile import load_task_dir, task_folders

        root = Path(source.dataset or info.source)
        if not root.is_dir():
            raise UsageError(f"{root}: not a folder of web tasks (each a folder with task.yaml)")
        folders = task_folders(root)
        parsed = [load_task_dir(f) for f in folders]
        if not parsed:
            raise UsageError(f"{root}: no task folders (a folder holding task.yaml, or folders of them)")
        return Suite(info=info, tasks=[self.task(t, info.name) for t in parsed],
                     provenance={"dataset_sha256": folder_sha256(folders)})

    def task_file(self) -> Any:
        from orchard_cli.tasks.web.taskfile import WebTask

        return WebTask

    def groups(self, task: Task) -> dict[str, str]:
        parsed = self.parsed(task)
        return {"site": parsed.site, "category": f"{parsed.site}/{parsed.category}"}

    def describe(self, task: Task) -> dict[str, Any]:
        parsed = self.parsed(task)
        return {"instance_id": task.task_id, "suite": task.suite, "family": self.name, "site": parsed.site,
                "category": parsed.category, "difficulty": parsed.difficulty, "prompt": parsed.prompt,
                "start": parsed.start.url(), "sites": parsed.sites, "checks": [c.id for c in parsed.checks],
                "gold_steps": len(parsed.gold)}

    def episode(self, task: Task, options: RunOptions) -> WebEpisode:
        return WebEpisode(self, task, options)


def collect_state(apps: Any, checks: list[Any], episode: Any) -> dict[str, Any]:
    """What grading reads, taken while the apps still hold the episode's state."""
    queries: dict[str, Any] = {}
    for check in checks:
        if check.kind == "state":
            try:
                queries[check.id] = apps.query(check.site, check.sql)
            except Exception as exc:  # noqa: BLE001 - a bad query fails its check, visibly
                queries[check.id] = {"error": f"{type(exc).__name__}: {exc}"}
    state: dict[str, Any] = {"requests": apps.requests(), "queries": queries, "apps": apps.snapshot()}
    if episode is not None:
        state.update(blocked=episode.blocked, steps=episode.steps,
                     url=episode.page.url if episode.page is not None else None)
    return state


def grade(checks: list[Any], evidence: Evidence) -> Outcome:
    """The verdict from the evidence alone (`eval regrade` gives the same one): a browser or app
    server that failed during the episode (`state.failure`) is infra_error, whatever the checks."""
    from orchard_cli.tasks.web.checks import run_checks

    failure = evidence.state.get("failure")
    if failure:
        return Outcome(resolved=False, category="infra_error", error=f"the browser or the apps failed: {failure}")

    results = run_checks(checks, evidence.answer, evidence.state)
    resolved = bool(results) and all(r.passed for r in results)
    passed = sum(r.passed for r in results)
    log = "\n".join(f"[{'PASS' if r.passed else 'FAIL'}] {r.id} ({r.kind}): {r.detail}" for r in results)
    blocked = evidence.state.get("blocked") or []
    if blocked:
        log += "\n" + "\n".join(f"[BLOCKED] {b['method']} {b['url']} (x{b.get('count', 1)})" for b in blocked)
    return Outcome(resolved=resolved, category="resolved" if resolved else "unresolved", reward=float(resolved),
                   log=log + "\n",
                   tests={"checks": {r.id: r.passed for r in results}, "check_kinds": {r.id: r.kind for r in results},
                          "passed": passed, "failed": len(results) - passed, "total": len(results),
                          "score": round(passed / len(results), 4) if results else 0.0,
                          "summary": f"{passed}/{len(results)} checks"})


def folder_sha256(folders: list[Path]) -> str:
    """One digest of a suite's task files (their relative paths and bytes), for the scorecard."""
    import hashlib

    from orchard_cli.tasks.web.taskfile import read_task_file

    digest = hashlib.sha256()
    for folder in folders:
        digest.update(f"{folder.name}/task.yaml\0".encode())
        digest.update(read_task_file(folder))
    return digest.hexdigest()
