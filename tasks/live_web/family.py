"""The live-web family: WebVoyager, Online-Mind2Web and DeepShop tasks from the user's data file
(datasets.py), browsed on the live web through orchard's browser and action space.

    load           `--dataset FILE` in the suite's published format
    sandbox_spec   a run without `--network full` stops here (needs_network, counted by the
                   scorecard); else leases a jailed browser (one per worker, tasks/web/browser_pool.py)
    setup          a fresh context at the task's start page; pages may reach any public http(s)
                   address and the start page's own origin, never the host's loopback or private
                   networks otherwise (tasks/web/episode.py `public_host`)
    tools          the web action space (tasks/web/actions.py)
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
from orchard_cli.outcome import CategoryInfo, Outcome
from orchard_cli.rollout.failures import EpisodeFailure
from orchard_cli.tasks.base import SuiteInfo, Task, TaskSelection
from orchard_cli.tasks.kit.leases import infra_failures
from orchard_cli.tasks.web.browser_family import BrowserFamily
from orchard_cli.webjudge.methods import SUITE_METHOD

LEASE_LABEL = "orchard.live-web.lease"
LIMITS = {"timeout_seconds": 900.0, "max_turns": 30.0}


class StartPageError(Exception):
    """The task's start page did not load (the site is down or refuses the browser): env_error."""


class LiveWebFamily(BrowserFamily):
    name = "live-web"
    grading = "in_place"
    environment_error = (StartPageError,)
    categories = {"needs_judge": CategoryInfo(label="not judged yet (orchard judge RUN)", color="#c7a4e0"),
                  "needs_network": CategoryInfo(label="needs the live web (--network full)", color="#a4c4e0")}
    suites = tuple(SuiteInfo(name, "live-web", "", f"{label} on the live web, from your data file "
                             "(--dataset FILE --network full; judged by `orchard judge`)")
                   for name, label in (("webvoyager", "WebVoyager"), ("online-mind2web", "Online-Mind2Web"),
                                       ("deepshop", "DeepShop")))

    lease_label = LEASE_LABEL

    def __init__(self) -> None:
        super().__init__()
        self.network = "none"
        """The run's `--network` (from load's selection): tasks run only with 'full'."""

    def new_pool(self) -> Any:
        from orchard_cli.tasks.web.browser_pool import BrowserPool

        import os

        # the jail shows the browser none of /etc but what it needs; the live web needs the resolver's file
        return BrowserPool("live-web", lambda: [p for p in ("/etc/resolv.conf",) if os.path.exists(p)])

    # ---- tasks -------------------------------------------------------------------------------
    def load(self, selection: TaskSelection, suite: SuiteInfo) -> list[Task]:
        from orchard_cli.tasks.live_web.datasets import WHERE, load_file
        from orchard_cli.tasks.swe.dataset import select
        from orchard_cli.tasks.web.browser import require_browser

        if not selection.dataset:
            raise UsageError(f"{suite.name} needs your copy of its tasks: --dataset FILE",
                             hint=f"the file is published at {WHERE[suite.name]}")
        path = Path(selection.dataset).expanduser()
        if not path.is_file() and not path.is_fifo() and not path.is_char_device():
            raise UsageError(f"--dataset {selection.dataset}: no such file")
        self.network = selection.network
        if self.network == "full":  # episodes will run: say now, once, what the browser lacks
            require_browser()
        parsed = load_file(suite.name, path)
        rows = [{"instance_id": t.id, "repo": t.website} for t in parsed]
        by_id = {t.id: t for t in parsed}
        chosen = select(rows, **{k if k != "slice" else "slice_": v for k, v in selection.filters().items()})
        return [Task(task_id=r["instance_id"], suite=suite.name, family=self.name,
                     problem_statement=by_id[r["instance_id"]].prompt, repo=by_id[r["instance_id"]].website,
                     record=by_id[r["instance_id"]].model_dump(mode="json")) for r in chosen]

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

    def limits(self, task: Task) -> dict[str, float]:
        return dict(LIMITS)

    # ---- the episode -------------------------------------------------------------------------
    def prompt(self, task: Task, workdir: str) -> str:
        from orchard_cli.tasks.web.family import prompt_text

        parsed = self.parsed(task)
        return prompt_text(parsed.prompt, {}) + (f"\nThe browser is open at {parsed.start_url}; you may go to "
                                                 "any public web site.")

    def sandbox_spec(self, task: Task, backend: str) -> SandboxSpec:
        if self.network != "full":
            raise EpisodeFailure("needs_network", "it browses the live web: run with --network full")
        with infra_failures():
            lease, _ = self.pool.lease_browser()
        return SandboxSpec.model_validate({"memory": "1Gi", "timeout": int(LIMITS["timeout_seconds"]) + 900,
                                           "labels": self.labels(lease)})

    def setup(self, task: Task, sandbox: SandboxHandle) -> None:
        """A fresh context at the start page. A browser that died is infra_error; a start page
        that does not load is the live site's failure (env_error), never the agent's."""
        from urllib.parse import urlsplit

        from orchard_cli.tasks.web.episode import BrowserEpisode

        parsed = self.parsed(task)
        live, owned = self.live(sandbox)
        browser = owned.browser
        parts = urlsplit(parsed.start_url)
        with infra_failures():
            episode = self.browse(live, BrowserEpisode(browser, {}, allowed=[f"{parts.scheme}://{parts.netloc}"],
                                                       open_web=True, record_shots=True, action_timeout=10.0))
        try:
            episode.open(parsed.start_url)
        except ConnectionError:
            raise
        except Exception as exc:  # noqa: BLE001 - Playwright's own errors: the site, not orchard
            why = " ".join(str(exc).split("Call log:")[0].split())  # Playwright's call log adds nothing here
            raise StartPageError(f"{parsed.start_url} did not load: {why[:300]}") from exc

    def collect(self, task: Task, sandbox: SandboxHandle | None, solution: Any, baseline: Any) -> Evidence:
        evidence = super().collect(task, sandbox, solution, baseline)
        if sandbox is None:
            return evidence
        live, owned = self.live(sandbox)
        episode = self.browser_evidence(live, evidence)
        state: dict[str, Any] = {"failure": self.failure(live, owned)}
        if episode is not None:
            state.update(blocked=episode.blocked, steps=episode.steps,
                         url=episode.page.url if episode.page is not None else None)
        evidence.state = state
        return evidence

    def quick_verdict(self, task: Task, evidence: Evidence) -> Outcome:
        return grade(task.suite, evidence)

    def grade(self, task: Task, evidence: Evidence, sandbox: SandboxHandle) -> Outcome:
        return grade(task.suite, evidence)


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
