"""The harness seam: an agent program run headless in a task's sandbox, its model traffic going
through orchard's recording proxy.

The rollout core's agent solver (orchard_cli/rollout/agent.py) opens a proxy episode, creates the
task's sandbox with `network='proxy'` pointed at that episode's URL and with `harness.mounts()`
bound in, sets the task up, calls `harness.run(...)`; the task's family then collects the evidence
(for SWE, the workspace diff). A harness never sees
the real model key: only the episode's short-lived token.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount
from orchard_cli.tools.spec import ToolAccess


class HarnessRun(BaseModel):
    """How the harness process ended."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int | None
    timed_out: bool = False
    duration_seconds: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    error: str | None = None
    """Set when the harness could not run at all (missing binary, crash at start)."""
    info: dict[str, str] = Field(default_factory=dict)


class HarnessContext(BaseModel):
    """What a harness needs to run one episode."""

    model_config = ConfigDict(extra="forbid")

    prompt: str
    """The task as the user would give it (problem statement plus where the repo is)."""
    model: str
    """Model name to request."""
    base_url: str
    """The proxy episode's OpenAI-compatible base URL as seen from INSIDE the sandbox (ends in /v1)."""
    api_key: str
    """The episode's short-lived token (never the real upstream key)."""
    timeout_seconds: float = 1800.0
    max_turns: int = 50
    tools: ToolAccess | None = None
    """The task's tools (MCP over stdio, or `task_tool.py` for the bash agent); None when the
    task declares none."""
    session: str | None = None
    """A multi-turn episode's conversation id (the same on every turn; letters, digits, dashes);
    None for a single-turn episode."""
    resume: bool = False
    """A later turn of `session`: continue that conversation, `prompt` being the user's next
    message (a harness with `multi_turn = True` supports it)."""


@runtime_checkable
class Harness(Protocol):
    """A harness may also declare `multi_turn = True`: it keeps its conversation between runs in
    one sandbox (`HarnessContext.session`) and continues it when `resume` is set, so a simulated
    user can answer it (`--user-model`). One without it runs single-turn episodes only."""

    name: str

    def check(self) -> list[str]:
        """Missing prerequisites, each with the exact command that installs it; [] when ready."""

    def version(self) -> str | None:
        """The harness program's version, for scorecards and trajectories."""

    def mounts(self) -> list[Mount]:
        """Host paths (binaries, runtimes) to bind read-only into the sandbox."""

    def run(self, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
        """Run one episode headless in the sandbox (workdir = the task's repository), with stdin
        closed and a wall-clock limit; return how it ended. Never raises for a harness failure."""
