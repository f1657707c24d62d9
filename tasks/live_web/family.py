"""The live-web family: WebVoyager, Online-Mind2Web and DeepShop tasks from the user's data file
(datasets.py), browsed on the live web through orchard's browser and action space.

    load           `--dataset FILE` in the suite's published format
    requires       the network: a run without `--network full` stops before any sandbox
                   (needs_network, counted by the scorecard)
    spec           leases a jailed browser (one per worker, tasks/kit/browser_pool.py)
    setup          a fresh context at the task's start page; pages may reach any public http(s)
                   address and the start page's own origin, never the host's loopback or private
                   networks otherwise (tasks/kit/browser_session.py `public_host`)
    tools          the web action space (tasks/kit/browser_actions.py)
    collect        the final answer, the actions, blocked requests, the final URL, a screenshot
                   after each action (what `orchard judge` shows the judge)
    grade          no program can: `needs_judge` (`orchard judge RUN` decides, by the suite's own
                   method); a browser that died is infra_error, a start page that would not load
                   env_error
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.errors import EnvironmentUnavailable
from orchard_cli.family import Requirements, RunOptions, Source, Suite, SuiteInfo, Task
from orchard_cli.outcome import CategoryInfo, Outcome
from orchard_cli.tasks.kit.browsing import BROWSER, BrowsingEpisode, prompt_text
from orchard_cli.tasks.kit.leases import LeasedFamily, infra_failures
from orchard_cli.webjudge.methods import SUITE_METHOD

LEASE_LABEL = "orchard.live-web.lease"
LIMITS = {"timeout_seconds": 900.0, "max_turns": 30.0}


class StartPageError(EnvironmentUnavailable):
    """The task's start page did not load (the site is down or refuses the browser): env_error."""


class LiveWebEpisode(BrowsingEpisode):
    """One live-web task: a leased browser at the task's start page, the public web around it."""

    family: "LiveWebFamily"
    requires = Requirements(network=True, host=list(BROWSER))

    def __init__(self, family: "LiveWebFamily", task: Task, options: RunOptions) -> None:
        super().__init__(family, task, options)
        self.parsed = family.parsed(task)
        self.limits = dict(LIMITS)

    def prompt(self, workdir: str) -> str:
        return prompt_text(self.parsed.prompt, {}) + (f"\nThe browser is open at {self.parsed.start_url}; "
                                                      "you may go to any public web site.")

    def spec(self, backend: str) -> SandboxSpec:
        with infra_failures():
            self.take(self.family.pool.lease_set)
        return SandboxSpec.model_validate({"memory": "1Gi", "timeout": int(LIMITS["timeout_seconds"]) + 900,
                                           "labels": self.labels()})

    def setup(self, sandbox: SandboxHandle, *, for_grading: bool = False) -> None:
        """A fresh context at the start page. A browser that died is infra_error; a start page
        that does not load is the live site's failure (env_error), never the agent's."""
        from urllib.parse import urlsplit

        from orchard_cli.tasks.kit.browser_session import BrowserSession

        start = self.parsed.start_url
        parts = urlsplit(start)
        with infra_failures():
            session = self.browse(BrowserSession(self.owned.browser, {}, allowed=[f"{parts.scheme}://{parts.netloc}"],
                                                 open_web=True, record_shots=True, action_timeout=10.0))
        try:
            session.open(start)
        except ConnectionError:
            raise
        except Exception as exc:  # noqa: BLE001 - Playwright's own errors: the site, not orchard
            why = " ".join(str(exc).split("Call log:")[0].split())  # Playwright's call log adds nothing here
            raise StartPageError(f"{start} did not load: {why[:300]}") from exc

    def collect(self, solution: Any, sandbox: SandboxHandle | None) -> Evidence:
        evidence = super().collect(solution, sandbox)
        if sandbox is None:
            return evidence
        session = self.browser_evidence(evidence)
        state: dict[str, Any] = {"failure": self.failure()}
        if session is not None:
            state.update(blocked=session.blocked, steps=session.steps,
                         url=session.page.url if session.page is not None else None)
        evidence.state = state
        return evidence

    def grade(self, evidence: Evidence, sandbox: SandboxHandle | None) -> Outcome:
        return grade(self.task.suite, evidence)


class LiveWebFamily(LeasedFamily):
    name = "live-web"
    grading = "in_place"
    harness = "web"  # orchard's web agent: accessibility-tree pages, browser actions
    suites = tuple(SuiteInfo(name, "live-web", "", f"{label} on the live web, from your data file "
                             "(--dataset FILE --network full; judged by `orchard judge`)")
                   for name, label in (("webvoyager", "WebVoyager"), ("online-mind2web", "Online-Mind2Web"),
                                       ("deepshop", "DeepShop")))

    lease_label = LEASE_LABEL
    requirement_labels = {
        "needs_judge": CategoryInfo(label="not judged yet (orchard judge RUN)", color="#c7a4e0"),
        "needs_network": CategoryInfo(label="needs the live web (--network full)", color="#a4c4e0")}
    """Its own labels for two core categories (what its scorecards showed before version 2)."""

    def new_pool(self) -> Any:
        import os

        from orchard_cli.tasks.kit.browser_pool import BrowserPool

        # the jail shows the browser none of /etc but what it needs; the live web needs the resolver's file
        return BrowserPool("live-web", lambda: [p for p in ("/etc/resolv.conf",) if os.path.exists(p)])

    def load(self, info: SuiteInfo, source: Source) -> Suite:
        from orchard_cli.tasks.live_web.datasets import WHERE, load_file

        if not source.dataset:
            raise UsageError(f"{info.name} needs your copy of its tasks: --dataset FILE",
                             hint=f"the file is published at {WHERE[info.name]}")
        path = Path(source.dataset).expanduser()
        if not path.is_file() and not path.is_fifo() and not path.is_char_device():
            raise UsageError(f"--dataset {source.dataset}: no such file")
        return Suite(info=info, tasks=[Task(task_id=t.id, suite=info.name, family=self.name, problem_statement=t.prompt,
                                            repo=t.website, record=t.model_dump(mode="json"))
                                       for t in load_file(info.name, path)])

    def parsed(self, task: Task) -> Any:
        from orchard_cli.tasks.live_web.datasets import LiveTask

        return LiveTask.model_validate(task.record)

    def groups(self, task: Task) -> dict[str, str]:
        parsed = self.parsed(task)
        found = {"website": parsed.website}
        if parsed.level:
            found["level"] = parsed.level
        if parsed.category:
            found["category"] = parsed.category
        return found

    def describe(self, task: Task) -> dict[str, Any]:
        parsed = self.parsed(task)
        return {"instance_id": task.task_id, "suite": task.suite, "family": self.name, "website": parsed.website,
                "start": parsed.start_url, "prompt": parsed.prompt, "level": parsed.level,
                "category": parsed.category, "reference_length": parsed.reference_length,
                "aspects": parsed.aspects or None, "judge_method": SUITE_METHOD[task.suite]}

    def episode(self, task: Task, options: RunOptions) -> LiveWebEpisode:
        return LiveWebEpisode(self, task, options)


def grade(suite: str, evidence: Evidence) -> Outcome:
    """No program decides a live-web task: the episode waits for `orchard judge`. Only a browser
    that failed under it is decided here (infra_error)."""
    failure = evidence.state.get("failure")
    if failure:
        return Outcome(resolved=False, category="infra_error", error=f"the browser failed: {failure}")
    steps = evidence.state.get("steps") or 0
    answer = evidence.answer if evidence.answer is not None else "(none)"
    return Outcome(resolved=False, category="needs_judge",
                   log=f"{steps} action(s); final URL {evidence.state.get('url')}; answer: {answer[:500]}\n"
                       f"judge it: orchard judge RUN (method {SUITE_METHOD.get(suite, 'webjudge')})\n",
                   tests={"summary": "not judged yet"})
