"""The miniwob family: MiniWoB++'s tasks (suite.py) on orchard's own browser and action space.

    load           the package's tasks (`--instances click-button,...`), each with a fixed seed
                   (the same page for every attempt); real-time tasks and those a seed does not
                   fix are left out unless named (`Suite.unlisted`)
    spec           leases a jailed browser (one per worker; it may read the package's HTML only)
    setup          a fresh context at the task's page, the episode started with the task's seed
    prompt         the task's own instruction (its utterance), as the page shows it
    tools          the web action space (tasks/kit/browser_actions.py)
    collect/grade  the page's reward: resolved when the episode is done with a raw reward above 0
                   (BrowserGym's reading); the reward itself is kept
"""

from __future__ import annotations

import zlib
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.family import Gold, GoldCall, Requirements, RunOptions, Source, Suite, SuiteInfo, Task
from orchard_cli.outcome import Outcome
from orchard_cli.tasks.kit.browsing import BROWSER, BrowsingEpisode, prompt_text
from orchard_cli.tasks.kit.leases import LeasedFamily, infra_failures

LEASE_LABEL = "orchard.miniwob.lease"


def seed_of(name: str) -> int:
    """A task's fixed seed (stable across runs and machines)."""
    return zlib.crc32(name.encode()) % 100000


class MiniwobEpisode(BrowsingEpisode):
    """One MiniWoB++ task: a fresh context at its page, its episode started with the task's seed;
    the instruction (its utterance) is the page's, known once setup started it."""

    family: "MiniwobFamily"
    requires = Requirements(host=[*BROWSER, "miniwob"])

    def __init__(self, family: "MiniwobFamily", task: Task, options: RunOptions) -> None:
        super().__init__(family, task, options)
        self.limits = {"max_turns": 10, "timeout_seconds": 300}
        self.started: dict[str, Any] = {}
        """What the page's episode said when it started (seed, utterance, fields)."""

    def prompt(self, workdir: str) -> str:
        return prompt_text(self.started.get("utterance") or self.task.problem_statement, {})

    def spec(self, backend: str) -> SandboxSpec:
        with infra_failures():
            self.take(self.family.pool.lease_set)
        return SandboxSpec.model_validate({"memory": "1Gi", "timeout": 1200, "labels": self.labels()})

    def setup(self, sandbox: SandboxHandle, *, for_grading: bool = False) -> None:
        from orchard_cli.tasks.kit.browser_session import BrowserSession
        from orchard_cli.tasks.miniwob.suite import html_root, start

        browser = self.owned.browser
        with infra_failures():
            session = self.browse(BrowserSession(browser, {}, allowed=[html_root().as_uri()]))
            session.open("about:blank")
            self.started = browser.call(start(session.page, self.task.record["name"], int(self.task.record["seed"])))

    def reference(self, kind: str) -> Gold | None:
        """The reference steps (gold only), read off the instruction of the episode's page; an
        empty Gold before setup (one exists); None for a task without a solver."""
        from orchard_cli.tasks.miniwob.gold import gold_steps, has_gold

        if kind != "gold" or not has_gold(self.task.task_id):
            return None
        utterance = self.started.get("utterance")
        if utterance is None:  # before its episode started: the steps depend on the instruction
            return Gold()
        steps = gold_steps(self.task.task_id, utterance)
        if steps is None:
            return None
        return Gold(tool_calls=[GoldCall(tool=tool, arguments=arguments) for tool, arguments in steps])

    def collect(self, solution: Any, sandbox: SandboxHandle | None) -> Evidence:
        from orchard_cli.tasks.miniwob.suite import reward

        evidence = super().collect(solution, sandbox)
        if sandbox is None:
            return evidence
        browser = self.owned.browser
        state: dict[str, Any] = {"started": self.started}

        def read_reward(session: Any) -> None:  # before the screenshot: the page's timer still runs
            if session.page is None:
                return
            try:
                state["miniwob"] = browser.call(reward(session.page), timeout=30)
            except Exception as exc:  # noqa: BLE001 - the browser died: grade reads the failure
                state["miniwob_error"] = f"{type(exc).__name__}: {exc}"
            state.update(blocked=session.blocked, steps=session.steps, url=session.page.url)

        self.browser_evidence(evidence, before_shots=read_reward)
        state["failure"] = self.failure() or state.pop("miniwob_error", None)
        evidence.state = state
        return evidence

    def grade(self, evidence: Evidence, sandbox: SandboxHandle | None) -> Outcome:
        """The whole verdict, from the evidence alone: a regrade needs no browser."""
        return grade(evidence)


class MiniwobFamily(LeasedFamily):
    name = "miniwob"
    grading = "in_place"
    harness = "web"  # orchard's web agent: accessibility-tree pages, browser actions
    suites = (SuiteInfo("miniwob", "miniwob", "miniwob", "MiniWoB++'s ~125 single-page web tasks "
                        "(pip install --no-deps miniwob==1.1.0)"),)

    lease_label = LEASE_LABEL

    def new_pool(self) -> Any:
        from orchard_cli.tasks.miniwob.pool import miniwob_pool

        return miniwob_pool()

    def load(self, info: SuiteInfo, source: Source) -> Suite:
        """Every task of the installed package, each with its fixed seed; the real-time ones and
        those a seed does not fix run only when named (`--instances`)."""
        from orchard_cli.tasks.miniwob.suite import NONDETERMINISTIC, REAL_TIME, task_names

        if source.dataset:
            raise UsageError("the miniwob suite comes from the installed 'miniwob' package; it takes no --dataset")
        names = task_names()
        tasks = [Task(task_id=n, suite=info.name, family=self.name,
                      problem_statement=f"MiniWoB++ task {n} (its instruction is on the page)",
                      repo="", record={"name": n, "seed": seed_of(n)}) for n in names]
        return Suite(info=info, tasks=tasks, unlisted=frozenset(n for n in names if n in NONDETERMINISTIC | REAL_TIME))

    def groups(self, task: Task) -> dict[str, str]:
        return {"task": task.task_id}

    def describe(self, task: Task) -> dict[str, Any]:
        from orchard_cli.tasks.miniwob.gold import has_gold

        return {"instance_id": task.task_id, "suite": task.suite, "family": self.name,
                "seed": task.record["seed"], "gold": has_gold(task.task_id)}

    def episode(self, task: Task, options: RunOptions) -> MiniwobEpisode:
        return MiniwobEpisode(self, task, options)


def grade(evidence: Evidence) -> Outcome:
    """MiniWoB's own verdict, from the evidence alone; a browser that failed is infra_error."""
    failure = evidence.state.get("failure") or evidence.state.get("miniwob_error")  # (older runs: the latter)
    if failure:
        return Outcome(resolved=False, category="infra_error", error=f"the browser failed: {failure}")
    result = evidence.state.get("miniwob") or {}
    done, raw = bool(result.get("done")), float(result.get("raw_reward") or 0.0)
    resolved = done and raw > 0
    log = (f"done={done} raw_reward={raw:g} reward={float(result.get('reward') or 0.0):g} "
           f"reason={result.get('reason')!r}\n") if result else "the page's reward was not read\n"
    return Outcome(resolved=resolved, category="resolved" if resolved else "unresolved",
                   reward=raw if done else 0.0, log=log,
                   tests={"summary": f"reward {raw:g}" if done else "not done", "score": max(raw, 0.0) if done else 0.0})
