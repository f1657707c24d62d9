"""The reference family: tiny Python modules with one bug each, graded by their own test.

It is what a new family looks like with nothing else in the way (docs/families.md walks through
it): tasks are data (`TASKS`: the files, the fixed files, the test command), the episode's
`prepare` writes the files into the sandbox and commits them, and `run_tests` applies the patch in
a fresh sandbox and runs the test. Everything else (the baseline snapshot, the diff as evidence,
`empty_patch`, the gold patch) comes from `PatchEpisode`. It needs only python3 and git in the sandbox, so the rollout
core's own tests and the family conformance suite run it in seconds; `orchard eval calc
--predictions gold` shows the whole loop on a fresh machine.
"""

from __future__ import annotations

import difflib
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.family import RunOptions, Source, Suite, SuiteInfo, Task
from orchard_cli.outcome import Outcome
from orchard_cli.tasks.patch import PatchCatalogue, PatchEpisode

TEST_TIMEOUT = 60.0


def _task(statement: str, module: str, buggy: str, fixed: str, test: str) -> dict[str, Any]:
    return {"problem_statement": statement, "files": {f"{module}.py": buggy, f"test_{module}.py": test},
            "fixed": {f"{module}.py": fixed}, "test_cmd": f"python3 test_{module}.py"}


TASKS: dict[str, dict[str, Any]] = {
    "calc-add": _task("add() subtracts instead of adding.", "calc",
                      "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n",
                      "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"),
    "calc-max": _task("largest() returns the smallest item of the list.", "stats",
                      "def largest(items):\n    return min(items)\n", "def largest(items):\n    return max(items)\n",
                      "from stats import largest\nassert largest([3, 9, 4]) == 9\nprint('ok')\n"),
    "calc-title": _task("shout() should upper-case the whole text, not only its first letter.", "words",
                        "def shout(text):\n    return text.capitalize()\n",
                        "def shout(text):\n    return text.upper()\n",
                        "from words import shout\nassert shout('hi there') == 'HI THERE'\nprint('ok')\n"),
    "calc-range": _task("count_to(n) should return 1..n inclusive.", "counting",
                        "def count_to(n):\n    return list(range(1, n))\n",
                        "def count_to(n):\n    return list(range(1, n + 1))\n",
                        "from counting import count_to\nassert count_to(3) == [1, 2, 3]\nprint('ok')\n"),
}


def unified_diff(before: dict[str, str], after: dict[str, str]) -> str:
    """A git-style diff from one set of files to another."""
    out = []
    for path in sorted(after):
        old, new = before.get(path, ""), after[path]
        if old != new:
            out.append(f"diff --git a/{path} b/{path}\n")
            out.extend(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))
    return "".join(out)


class CalcEpisode(PatchEpisode):
    """One calc task: its files in a fresh git repository, graded by its test command."""

    def spec(self, backend: str) -> SandboxSpec:
        return SandboxSpec(memory="512Mi", labels={"orchard.family": "calc"})

    def prepare(self, sandbox: SandboxHandle) -> None:
        for path, text in self.task.record["files"].items():
            sandbox.write_file(path, text)
        job = sandbox.exec("git init -q && git add . && git -c user.name=o -c user.email=o@o commit -qm base")
        if not job.ok:
            raise RuntimeError(f"git failed in the sandbox: {job.stderr.strip()[-300:]}")

    def gold_patch(self) -> str:
        return unified_diff(self.task.record["files"], self.task.record["fixed"])

    def run_tests(self, evidence: Evidence, sandbox: SandboxHandle) -> Outcome:
        applied = sandbox.apply_patch(evidence.patch or "")
        if not applied.applied:
            return Outcome(resolved=False, category="patch_apply_failed", log=applied.output)
        job = sandbox.exec(self.task.record["test_cmd"], timeout=TEST_TIMEOUT)
        if job.oom_killed:
            return Outcome(resolved=False, category="env_error", log=job.stdout + job.stderr,
                           error=f"out of memory (limit {sandbox.info.spec.memory})")
        ok = job.exit_code == 0
        return Outcome(resolved=ok, category="resolved" if ok else "unresolved", reward=float(ok),
                       log=job.stdout + job.stderr,
                       tests={"passed": int(ok), "failed": int(not ok), "summary": f"{int(ok)}/1 passed"})

    def eval_script(self) -> str | None:
        return self.task.record["test_cmd"] + "\n"


class CalcFamily(PatchCatalogue):
    name = "calc"
    suites = (SuiteInfo("calc", "calc", "builtin", "4 one-line bugs in tiny Python modules (the reference family)"),)

    def load(self, info: SuiteInfo, source: Source) -> Suite:
        """The builtin TASKS, or a data file of records in their shape (`--dataset`, `--family calc`)."""
        from orchard_cli.tasks.datafile import read_records

        path = source.dataset or (None if info.source == "builtin" else info.source)
        rows = read_records(path) if path else [{"instance_id": k, **v} for k, v in TASKS.items()]
        for row in rows:
            missing = [k for k in ("instance_id", "problem_statement", "files", "fixed", "test_cmd") if k not in row]
            if missing:
                raise UsageError(f"{path}: task {row.get('instance_id', '?')!r} lacks {', '.join(missing)}")
            row.setdefault("repo", "orchard/calc")
        return Suite(info=info, tasks=[self.task(r, info.name) for r in rows])

    def task(self, record: dict[str, Any], suite: str) -> Task:
        return Task(task_id=record["instance_id"], suite=suite, family=self.name, repo=record["repo"],
                    problem_statement=record["problem_statement"], record=record)

    def episode(self, task: Task, options: RunOptions) -> CalcEpisode:
        return CalcEpisode(task, options)
