"""Where a patch for a task comes from: the `AttemptSource` seam of `orchard eval` (and `distill`).

Built in: `gold` (the task's reference patch), `empty` (no patch: the floor), and a SWE-bench
predictions file. An agent run (`--model NAME --base-url URL --harness NAME`) is a source too:
harness adapters register a factory under their name in `solvers` (entry-point group
`orchard.solvers`); the factory is called as `factory(model=..., base_url=..., seed=...)` and
returns an `AttemptSource` whose `needs_sandbox` is true (the agent works in a sandbox set up for
the task; the patch it leaves is graded in a fresh one). Such a source may also define
`adapt_spec(task, spec) -> SandboxSpec`, called on the family's spec of the agent's sandbox only
(to point its network at the recording proxy and bind the harness in); `record(task, attempt,
outcome, out) -> path` (called with the final verdict, e.g. to write the agent's trajectory beside
the scorecard); and `close()` (at the end of the run). An `Attempt.info["failure"]` of
{category, error} says what the attempt counts as when its patch does not resolve the task
(infra_error when the model could not be reached, timeout): never 'unresolved' then. Any harness
of `orchard_cli.harnesses` that is not a registered solver runs as `agent_source.HarnessSource`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.predictions import Prediction, load_predictions
from orchard_cli.registry import Registry

if TYPE_CHECKING:
    from orchard_cli.env import SandboxHandle
    from orchard_cli.tasks.base import Task

solvers: Registry = Registry("harness", "orchard.solvers", {})


class Attempt(BaseModel):
    """What one attempt produced: the patch, and what it cost."""

    model_config = ConfigDict(extra="forbid")

    patch: str = ""
    model: str | None = None
    """model_name_or_path for predictions.jsonl."""
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    """None when the model's price is unknown (never 0 for 'unknown')."""
    trajectory: str | None = None
    """Path of the recorded trajectory (JSONL), when a harness ran."""
    info: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class AttemptSource(Protocol):
    name: str
    """'gold', 'empty', 'predictions:<file>', 'model:<name>@<harness>'."""
    version: str | None
    """The harness version, for the scorecard's reproducibility block."""
    needs_sandbox: bool
    model_ran: bool

    def solve(self, task: "Task", sandbox: "SandboxHandle | None", *, attempt: int,
              log_dir: Path) -> Attempt:
        """A patch for `task` (in `sandbox`, set up for the task, when `needs_sandbox`)."""


class GoldSource:
    name, version, needs_sandbox, model_ran = "gold", None, False, False

    def __init__(self, family: Any) -> None:
        self.family = family

    def solve(self, task: "Task", sandbox: "SandboxHandle | None", *, attempt: int,
              log_dir: Path) -> Attempt:
        return Attempt(patch=self.family.gold_patch(task), model="gold")


class EmptySource:
    name, version, needs_sandbox, model_ran = "empty", None, False, False

    def solve(self, task: "Task", sandbox: "SandboxHandle | None", *, attempt: int,
              log_dir: Path) -> Attempt:
        return Attempt(patch="", model="empty")


class PredictionsSource:
    """Patches from a SWE-bench predictions file. A selected task without a line in the file has
    no patch (empty_patch), as SWE-bench reports it; the rate stays over the whole selection."""

    version, needs_sandbox, model_ran = None, False, False

    def __init__(self, path: str | Path, predictions: dict[str, Prediction]) -> None:
        self.name = f"predictions:{Path(path).name}"
        self.predictions = predictions
        names = {p.model_name_or_path for p in predictions.values() if p.model_name_or_path}
        self.model = names.pop() if len(names) == 1 else None

    def solve(self, task: "Task", sandbox: "SandboxHandle | None", *, attempt: int,
              log_dir: Path) -> Attempt:
        pred = self.predictions.get(task.task_id)
        if pred is None:
            return Attempt(patch="", model=self.model)
        return Attempt(patch=pred.model_patch, model=pred.model_name_or_path or self.model)


def make_source(config: Any, family: Any, task_ids: set[str]) -> AttemptSource:
    """The source an eval configuration asks for; every problem is a one-line UsageError."""
    predictions, harness, model = config.predictions, config.harness, config.model
    if predictions and (harness or model):
        raise UsageError("give either --predictions or --model/--harness, not both")
    if predictions == "gold":
        if not callable(getattr(family, "gold_patch", None)):
            raise UsageError(f"tasks of {config.suite} have no gold patches")
        return GoldSource(family)
    if predictions == "empty":
        return EmptySource()
    if predictions:
        return PredictionsSource(predictions, load_predictions(predictions, task_ids))
    if harness or model:
        return harness_source(harness, model, config.base_url, config.seed,
                              max_turns=getattr(config, "max_turns", None),
                              timeout=getattr(config, "agent_timeout", None))
    raise UsageError("nothing to evaluate: say where the patches come from",
                     hint="--predictions gold|empty|PATH, or --model NAME --base-url URL --harness NAME")


def harness_source(harness: str | None, model: str | None, base_url: str | None,
                   seed: int | None, *, max_turns: int | None = None,
                   timeout: float | None = None) -> AttemptSource:
    """An agent harness driving a model (the seam the harness adapters fill)."""
    if not harness or not model:
        raise UsageError("an agent run needs both --model NAME and --harness NAME",
                         hint="or grade existing patches with --predictions gold|empty|PATH")
    if harness in solvers.names():
        factory = solvers.load(harness)
        return factory(model=model, base_url=base_url, seed=seed)
    from orchard_cli.agent_source import HarnessSource  # any registered harness, via the proxy

    source = HarnessSource(harness, model=model, base_url=base_url, seed=seed)
    limits = {k: v for k, v in (("max_turns", max_turns), ("timeout_seconds", timeout)) if v is not None}
    if limits:
        source.options = source.options.model_copy(update=limits)
    return source
