"""Where an episode's answer comes from: the one `Solver` seam of the rollout core.

Built in: `gold` (the family's reference solution), `empty` (nothing: the floor, a null run), a
SWE-bench predictions file, and an agent (`AgentSolver` in `agent.py`: a harness driving a model
through the recording proxy). `choose.make_solver` picks one from a run's options.

A solver that works in a sandbox (`needs_sandbox`) gets one created from the family's spec, passed
through `adapt` (the agent points its network at the proxy and binds its harness in), and set up
for the task; the family then collects the evidence there. One that does not hands its evidence
over in the `Solution` (a patch read from a file).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence

if TYPE_CHECKING:
    from orchard_cli.env import SandboxHandle
    from orchard_cli.env.models import SandboxSpec
    from orchard_cli.family import EpisodeEnv, Family, Task
    from orchard_cli.runs.predictions import Prediction


@dataclass
class SolveContext:
    """What a solver gets for one episode."""

    task: "Task"
    family: "Family"
    attempt: int
    episode_id: str
    env: "EpisodeEnv | None" = None
    """The episode (its prompt, limits, tools, simulated user and references)."""
    sandbox: "SandboxHandle | None" = None
    log_dir: Path | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    activity: Any = None
    """The episode's `live.Activity` when a person is watching: an agent attaches its call counter."""


@dataclass
class Solution:
    """What a solver produced, and what it cost."""

    evidence: Evidence | None = None
    """Evidence the solver has itself (a patch from a file); the family's `collect` adds to it."""
    answer: str | None = None
    """The agent's final message."""
    model: str | None = None
    """model_name_or_path, for predictions.jsonl."""
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    """None when the model's price is unknown (never 0 for 'unknown')."""
    failure: tuple[str, str] | None = None
    """(category, reason) an unresolved episode counts as when the model is not to blame."""
    agent: Any = None
    """The agent's run (`agent.AgentResult`): calls, harness output; None for other solvers."""
    recorded: bool = False
    """The evidence is what an earlier run collected (regrade): the family does not collect again."""


@runtime_checkable
class Solver(Protocol):
    name: str
    """'gold', 'empty', 'predictions:<file>', 'model:<name>@<harness>'."""
    harness: str
    """The harness name in episode ids and trajectories ('gold', 'empty', 'predictions' otherwise)."""
    model: str
    """The model name in episode ids ('gold', 'empty', ... when no model ran)."""
    version: str | None
    """The harness program's version, for the scorecard's reproducibility block."""
    model_ran: bool

    def needs_sandbox(self, family: "Family") -> bool:
        """Whether this solver works in a sandbox set up for the task."""

    def adapt(self, task: "Task", spec: "SandboxSpec") -> "SandboxSpec":
        """The family's sandbox spec, changed for this solver (network, mounts)."""

    def solve(self, context: SolveContext) -> Solution:
        """One attempt at the task."""

    def close(self) -> None:
        """The run is over: stop what the solver started (a proxy, an endpoint)."""


class SolverBase:
    """Defaults for solvers that need no sandbox of their own and start nothing."""

    version: str | None = None
    model_ran = False

    def needs_sandbox(self, family: "Family") -> bool:
        return family.grading == "in_place"  # the evidence lives in the sandbox: make one

    def adapt(self, task: "Task", spec: "SandboxSpec") -> "SandboxSpec":
        return spec

    def close(self) -> None:
        return None


class GoldSolver(SolverBase):
    """The task's reference solution: its patch, or its commands and tool calls replayed in the
    set-up sandbox, and its answer."""

    name = harness = model = "gold"
    kind = "gold"
    """Which reference of the episode (`EpisodeEnv.reference`) is replayed."""

    def __init__(self, family: "Family | None" = None) -> None:
        self.family = family
        """The family, for a subclass that changes the replay by what it knows of the task."""

    def replayed(self, context: SolveContext) -> Any:
        """The solution to replay (a `Gold`): the episode's reference of this solver's kind."""
        assert context.env is not None, "the rollout core hands every solver its episode"
        return context.env.reference(self.kind)  # type: ignore[arg-type]

    def solve(self, context: SolveContext) -> Solution:
        gold = self.replayed(context)
        if gold is None:
            raise UsageError(f"task {context.task.task_id} has no {self.kind.replace('_', ' ')} solution")
        if context.sandbox is not None:
            for command in gold.commands:
                job = context.sandbox.exec(command, timeout=600)
                if not job.ok:
                    raise RuntimeError(f"gold command {command[:200]!r} failed: {(job.stderr or job.error or '').strip()[-300:]}")
            if gold.tool_calls:
                session = context.env.tools()
                if session is None:
                    raise UsageError(f"task {context.task.task_id}: its gold solution calls tools, but it has none")
                for call in gold.tool_calls:
                    session.call(call.tool, call.arguments)
        return Solution(evidence=Evidence(patch=gold.patch), answer=gold.answer, model=self.model)


class EmptySolver(SolverBase):
    """No answer at all: the floor every family's null run must fail."""

    name = harness = model = "empty"

    def solve(self, context: SolveContext) -> Solution:
        return Solution(model="empty")


class PredictionsSolver(SolverBase):
    """Patches from a SWE-bench predictions file. A selected task without a line in the file has
    no patch (empty_patch), as SWE-bench reports it; the rate stays over the whole selection."""

    harness = "predictions"

    def __init__(self, path: str | Path, predictions: dict[str, "Prediction"]) -> None:
        self.name = f"predictions:{Path(path).name}"
        self.predictions = predictions
        names = {p.model_name_or_path for p in predictions.values() if p.model_name_or_path}
        self.model = names.pop() if len(names) == 1 else "predictions"

    def needs_sandbox(self, family: "Family") -> bool:
        return False

    def solve(self, context: SolveContext) -> Solution:
        pred = self.predictions.get(context.task.task_id)
        if pred is None:
            return Solution(evidence=Evidence(patch=""), model=self.model)
        return Solution(evidence=Evidence(patch=pred.model_patch),
                        model=pred.model_name_or_path or self.model)
