"""Families whose answer is a patch to a git working tree (SWE-bench and the reference family).

`PatchEpisode` is an episode the way SWE-bench works: the baseline is the working tree right
after setup (a git tree id), the evidence is the diff of the working tree against it (files the
solver wrote for itself left out), an empty patch is `empty_patch` without a sandbox, and grading
happens in a fresh sandbox (`PatchCatalogue.grading = "fresh"`). A subclass implements `spec`,
`prepare` (the task's files in the sandbox) and `run_tests` (the verdict on the applied patch), and
says where the gold patch is (`gold_patch`).
"""

from __future__ import annotations

import shlex
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.evidence import Evidence
from orchard_cli.family import BaseEpisode, BaseFamily, Gold, Task
from orchard_cli.outcome import CategoryInfo, Outcome
from orchard_cli.tasks.base import FamilyBase

PATCH_FILE = "/tmp/orchard-episode.diff"
PATCH_CATEGORIES = {
    "empty_patch": CategoryInfo(label="empty patch", color="#c7cdd6"),
    "patch_apply_failed": CategoryInfo(label="patch did not apply", color="#e2a03f"),
}


def _exec(sandbox: SandboxHandle, command: str, timeout: float = 120.0) -> str:
    job = sandbox.exec(command, timeout=timeout)
    if not job.ok:
        lines = [line.strip() for line in (job.stderr or "").splitlines() if line.strip()]
        raise RuntimeError((lines[-1][:300] if lines else "") or job.error or f"{job.status}, exit {job.exit_code}")
    return job.stdout


def snapshot(sandbox: SandboxHandle) -> str:
    """The working tree (untracked files included) as a git tree id."""
    return _exec(sandbox, "git add -A >/dev/null && git write-tree && git reset -q").strip()


def workspace_patch(sandbox: SandboxHandle, base: str, exclude: list[str] | tuple[str, ...] = ()) -> str:
    """What changed in the working tree since `base`, as a git diff (`exclude` pathspecs left
    out). Read through a file, so output limits never cut it."""
    specs = " ".join(shlex.quote(f":(exclude){p}") for p in exclude)
    _exec(sandbox, f"git add -A >/dev/null && git diff --cached --no-color --no-ext-diff "
                   f"{shlex.quote(base)} -- . {specs} > {PATCH_FILE}; status=$?; git reset -q; exit $status")
    return sandbox.read_file(PATCH_FILE).decode("utf-8", "replace")


def patch_prompt(task: Task, workdir: str) -> str:
    repo = f" ({task.repo})" if task.repo else ""
    return (f"The git repository{repo} is checked out at {workdir}; that is your working "
            f"directory.\n\n<issue>\n{task.problem_statement.strip()}\n</issue>\n\n"
            f"Resolve the issue by editing the source files in {workdir}. Your fix is taken from "
            "the working tree as it is when you stop, so do not commit it, and do not modify or "
            "add tests: hidden tests will check the fix. When the fix is in place, stop and say "
            "briefly what you changed.")


class PatchCatalogue(BaseFamily):
    """A version-2 family graded on a patch, in a fresh sandbox, with SWE-bench's two categories.
    (`PatchFamily` keeps its version-1 meaning, the hooks third-party families subclassed.)"""

    categories = PATCH_CATEGORIES
    grading = "fresh"


class PatchEpisode(BaseEpisode):
    """An episode whose answer is the diff of the working tree."""

    baseline: str | None = None

    def prepare(self, sandbox: SandboxHandle) -> None:
        """Put the task's files in `sandbox` (a git working tree)."""
        raise NotImplementedError

    def run_tests(self, evidence: Evidence, sandbox: SandboxHandle) -> Outcome:
        """The verdict on `evidence.patch` (not empty) in a fresh sandbox set up for the task."""
        raise NotImplementedError

    def gold_patch(self) -> str:
        """The task's reference patch ('' when it has none)."""
        return ""

    def setup(self, sandbox: SandboxHandle, *, for_grading: bool = False) -> None:
        self.prepare(sandbox)
        if not for_grading:  # what the solver's changes are read against
            self.baseline = snapshot(sandbox)

    def prompt(self, workdir: str) -> str:
        return patch_prompt(self.task, workdir)

    def collect(self, solution: Any, sandbox: SandboxHandle | None) -> Evidence:
        evidence = super().collect(solution, sandbox)
        if evidence.patch is None:  # nothing handed over: the diff of the working tree, if any
            evidence.patch = workspace_patch(sandbox, self.baseline) if sandbox is not None and self.baseline else ""
        return evidence

    def grade(self, evidence: Evidence, sandbox: SandboxHandle | None) -> Outcome | None:
        if not (evidence.patch or "").strip():
            return Outcome(resolved=False, category="empty_patch")
        return None if sandbox is None else self.run_tests(evidence, sandbox)

    def reference(self, kind: str) -> Gold | None:
        patch = self.gold_patch() if kind == "gold" else ""
        return Gold(patch=patch) if patch else None


class PatchFamilyV1(FamilyBase):
    """The version-1 hooks for families graded on a patch (SWE, until it moves to version 2; and
    third-party families, which subclass it as `PatchFamily`)."""

    categories = PATCH_CATEGORIES
    grading = "fresh"

    def gold_patch(self, task: Task) -> str:
        """The task's reference patch ('' when it has none)."""
        return ""

    def gold_solution(self, task: Task) -> Gold | None:
        patch = self.gold_patch(task)
        return Gold(patch=patch) if patch else None

    def prompt(self, task: Task, workdir: str) -> str:
        return patch_prompt(task, workdir)

    def baseline(self, task: Task, sandbox: SandboxHandle) -> Any:
        return snapshot(sandbox)

    def collect(self, task: Task, sandbox: SandboxHandle | None, solution: Any, baseline: Any) -> Evidence:
        evidence = super().collect(task, sandbox, solution, baseline)
        if evidence.patch is None:  # nothing handed over: the diff of the working tree, if any
            evidence.patch = workspace_patch(sandbox, baseline) if sandbox is not None and baseline else ""
        return evidence

    def quick_verdict(self, task: Task, evidence: Evidence) -> Outcome | None:
        if not (evidence.patch or "").strip():
            return Outcome(resolved=False, category="empty_patch")
        return None


PatchFamily = PatchFamilyV1
"""The name version-1 families (docs/families.md before seam version 2) subclassed."""
