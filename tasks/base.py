"""The task seam: what `eval` and `distill` need from any task family.

A family loads tasks from a source (a suite name or a file), says what sandbox a task needs, sets
the sandbox up (repository at the right commit, environment), and grades a final patch there.
`eval` and `distill` pair a task with a harness in a sandbox through this seam only.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec

Category = Literal["resolved", "unresolved", "empty_patch", "patch_apply_failed", "timeout",
                   "env_error", "infra_error"]
ERROR_CATEGORIES = frozenset({"env_error", "infra_error"})


class Task(BaseModel):
    """One task: an id, the family that knows it, the prompt, and the family's own record."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    suite: str
    family: str
    problem_statement: str
    repo: str = ""
    record: dict[str, Any] = Field(default_factory=dict)
    """The task's source record as loaded (for SWE: the SWE-bench instance)."""


class Outcome(BaseModel):
    """A graded attempt."""

    model_config = ConfigDict(extra="forbid")

    resolved: bool
    category: Category
    reward: float = 0.0
    tests: dict[str, Any] = Field(default_factory=dict)
    """Test counts and per-test status (for SWE: FAIL_TO_PASS / PASS_TO_PASS success/failure)."""
    error: str | None = None
    """For env_error / infra_error / timeout: the cause in one line."""
    log: str = ""
    """The test output the verdict was read from."""


@runtime_checkable
class TaskFamily(Protocol):
    name: str

    def load(self, source: str, **filters: Any) -> list[Task]:
        """Tasks of a suite name or a file, filtered (ids, repo, limit/slice)."""

    def sandbox_spec(self, task: Task, backend: str) -> SandboxSpec:
        """The sandbox this task runs in, on the named backend."""

    def setup(self, task: Task, sandbox: SandboxHandle) -> None:
        """Prepare the sandbox (repository at its commit, environment). Raises EnvironmentError
        subclasses of OrchardError when the environment cannot be had."""

    def grade(self, task: Task, sandbox: SandboxHandle, patch: str) -> Outcome:
        """Apply `patch`, run the task's tests, and return the verdict."""
