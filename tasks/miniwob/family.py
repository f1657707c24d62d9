"""The miniwob family: MiniWoB++'s tasks (suite.py) on orchard's own browser and action space.

    load           the package's tasks (`--instances click-button,...`), each with a fixed seed
                   (the same page for every attempt); real-time tasks and those a seed does not
                   fix are left out unless named
    sandbox_spec   leases a jailed browser (one per worker; it may read the package's HTML only)
    setup          a fresh context at the task's page, the episode started with the task's seed
    prompt         the task's own instruction (its utterance), as the page shows it
    tools          the web action space (tasks/web/actions.py)
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
from orchard_cli.outcome import Outcome
from orchard_cli.tasks.base import Gold, GoldCall, SuiteInfo, Task, TaskSelection
from orchard_cli.tasks.kit.leases import infra_failures
from orchard_cli.tasks.web.browser_family import BrowserFamily

LEASE_LABEL = "orchard.miniwob.lease"


def seed_of(name: str) -> int:
    """A task's fixed seed (stable across runs and machines)."""
    return zlib.crc32(name.encode()) % 100000


class MiniwobFamily(BrowserFamily):
    name = "miniwob"
    grading = "in_place"
    suites = (SuiteInfo("miniwob", "miniwob", "miniwob", "MiniWoB++'s ~125 single-page web tasks "
                        "(pip install --no-deps miniwob==1.1.0)"),)

    lease_label = LEASE_LABEL

    def __init__(self) -> None:
        super().__init__()
        self._utterances: dict[str, str] = {}

    def new_pool(self) -> Any:
        from orchard_cli.tasks.miniwob.pool import miniwob_pool

        return miniwob_pool()

    def load(self, selection: TaskSelection, suite: SuiteInfo) -> list[Task]:
        from orchard_cli.tasks.miniwob.suite import NONDETERMINISTIC, REAL_TIME, task_names
        from orchard_cli.tasks.swe.dataset import select

        from orchard_cli.tasks.web.browser import require_browser

        require_browser()
        if selection.dataset:
            raise UsageError("the miniwob suite comes from the installed 'miniwob' package; it takes no --dataset")
        names = task_names()
        named = set(selection.instances or [])
        unknown = sorted(named - set(names))
        if unknown:
            raise UsageError(f"no MiniWoB++ task {unknown[0]!r} (see `orchard tasks ls miniwob`)")
        usable = [n for n in names if n in named or n not in NONDETERMINISTIC | REAL_TIME]
        rows = [{"instance_id": n, "repo": "miniwob"} for n in usable]
        chosen = select(rows, **{k if k != "slice" else "slice_": v for k, v in selection.filters().items()})
        return [Task(task_id=r["instance_id"], suite=suite.name, family=self.name,
                     problem_statement=f"MiniWoB++ task {r['instance_id']} (its instruction is on the page)",
                     record={"name": r["instance_id"], "seed": seed_of(r["instance_id"])}) for r in chosen]

    def groups(self, task: Task) -> dict[str, str]:
        return {"task": task.task_id}

    def describe(self, task: Task) -> dict[str, Any]:
        from orchard_cli.tasks.miniwob.gold import has_gold

        return {"instance_id": task.task_id, "suite": task.suite, "family": self.name,
                "seed": task.record["seed"], "gold": has_gold(task.task_id)}

    def limits(self, task: Task) -> dict[str, float]:
        return {"max_turns": 10, "timeout_seconds": 300}

    def prompt(self, task: Task, workdir: str) -> str:
        from orchard_cli.tasks.web.family import prompt_text

        with self._lock:
            utterance = self._utterances.get(task.task_id)
        instruction = utterance or task.problem_statement
        return prompt_text(instruction, {})

    def sandbox_spec(self, task: Task, backend: str) -> SandboxSpec:
        with infra_failures():
            lease, _ = self.pool.lease_browser()
        return SandboxSpec.model_validate({"memory": "1Gi", "timeout": 1200, "labels": self.labels(lease)})

    def _browser(self, sandbox: SandboxHandle) -> tuple[Any, Any]:
        live, owned = self.live(sandbox)
        return live, owned.browser

    def setup(self, task: Task, sandbox: SandboxHandle) -> None:
        from orchard_cli.tasks.miniwob.suite import html_root, start
        from orchard_cli.tasks.web.episode import BrowserEpisode

        live, browser = self._browser(sandbox)
        with infra_failures():
            episode = self.browse(live, BrowserEpisode(browser, {}, allowed=[html_root().as_uri()]))
            episode.open("about:blank")
            live.started = browser.call(start(episode.page, task.record["name"], int(task.record["seed"])))
        with self._lock:
            self._utterances[task.task_id] = live.started["utterance"]

    def gold_solution(self, task: Task) -> Gold | None:
        """The reference steps, read off the instruction of the episode set up for the task; an
        empty Gold before that (one exists); None for a task without a solver."""
        from orchard_cli.tasks.miniwob.gold import gold_steps, has_gold

        if not has_gold(task.task_id):
            return None
        with self._lock:
            utterance = self._utterances.get(task.task_id)
        if utterance is None:  # before its episode started: the steps depend on the instruction
            return Gold()
        steps = gold_steps(task.task_id, utterance)
        if steps is None:
            return None
        return Gold(tool_calls=[GoldCall(tool=tool, arguments=arguments) for tool, arguments in steps])

    def collect(self, task: Task, sandbox: SandboxHandle | None, solution: Any, baseline: Any) -> Evidence:
        from orchard_cli.tasks.miniwob.suite import reward

        evidence = super().collect(task, sandbox, solution, baseline)
        if sandbox is None:
            return evidence
        live, browser = self._browser(sandbox)
        state: dict[str, Any] = {"started": live.started or {}}
        owned = self.pool.get(live.lease)

        def read_reward(episode: Any) -> None:  # before the screenshot: the page's timer still runs
            if episode.page is None:
                return
            try:
                state["miniwob"] = browser.call(reward(episode.page), timeout=30)
            except Exception as exc:  # noqa: BLE001 - the browser died: grade reads the failure
                state["miniwob_error"] = f"{type(exc).__name__}: {exc}"
            state.update(blocked=episode.blocked, steps=episode.steps, url=episode.page.url)

        self.browser_evidence(live, evidence, before_shots=read_reward)
        state["failure"] = self.failure(live, owned) or state.pop("miniwob_error", None)
        evidence.state = state
        return evidence

    def quick_verdict(self, task: Task, evidence: Evidence) -> Outcome:
        """The whole verdict, from the evidence alone: a regrade needs no browser."""
        return grade(evidence)

    def grade(self, task: Task, evidence: Evidence, sandbox: SandboxHandle) -> Outcome:
        return grade(evidence)


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
