"""Families whose answer is a patch to a git working tree (SWE-bench and the reference family).

`PatchFamily` fills the seam's optional hooks the way SWE-bench works: the baseline is the working
tree right after setup (a git tree id), the evidence is the diff of the working tree against it
(files the solver wrote for itself left out), an empty patch is `empty_patch` without a sandbox,
and grading happens in a fresh sandbox (`grading = "fresh"`). A subclass implements `load`,
`sandbox_spec`, `setup` and `grade`, and says where the gold patch is (`gold_patch`).
"""

from __future__ import annotations

import shlex
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.evidence import Evidence
from orchard_cli.outcome import CategoryInfo, Outcome
from orchard_cli.tasks.base import FamilyBase, Gold, Task

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


class PatchFamily(FamilyBase):
    """The seam's optional hooks for families graded on a patch, as SWE-bench grades."""

    categories = PATCH_CATEGORIES
    grading = "fresh"

    def gold_patch(self, task: Task) -> str:
        """The task's reference patch ('' when it has none)."""
        return ""

    def gold_solution(self, task: Task) -> Gold | None:
        patch = self.gold_patch(task)
        return Gold(patch=patch) if patch else None

    def prompt(self, task: Task, workdir: str) -> str:
        repo = f" ({task.repo})" if task.repo else ""
        return (f"The git repository{repo} is checked out at {workdir}; that is your working "
                f"directory.\n\n<issue>\n{task.problem_statement.strip()}\n</issue>\n\n"
                f"Resolve the issue by editing the source files in {workdir}. Your fix is taken from "
                "the working tree as it is when you stop, so do not commit it, and do not modify or "
                "add tests: hidden tests will check the fix. When the fix is in place, stop and say "
                "briefly what you changed.")

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
