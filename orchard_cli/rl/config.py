"""What an `orchard rl` run is: its options (`RLConfig`, DIR/orchard_rl.json), its state, one
step's record (steps.jsonl), and the run folder's rules (a folder holding another run is refused)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli import __version__
from orchard_cli.errors import UsageError
from orchard_cli.records import read_json
from orchard_cli.rl.learner import LearnerConfig
from orchard_cli.rl.rollouts import Sampling
from orchard_cli.rollout.agent import EpisodeOptions
from orchard_cli.selection import TaskSelection

STATE_FILE = "orchard_rl.json"
_RESUMABLE = {"out", "resume", "steps", "save_every", "eval_every", "workers", "policy_urls", "api_key_env"}
Sync = Literal["lora", "checkpoint"]


class RLConfig(BaseModel):
    """Everything `orchard rl` was asked to do (DIR/orchard_rl.json)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    selection: TaskSelection | None = None
    """The tasks to train on (None with `rollouts_file`)."""
    eval_selection: TaskSelection | None = None
    """Held-out tasks, evaluated every `eval_every` steps."""
    rollouts_file: str | None = None
    model: str = "smollm2"
    """The policy's starting weights (smollm2 or a checkpoint folder); servers named by
    `policy_urls` must serve the same model."""
    policy_urls: list[str] = Field(default_factory=list)
    """OpenAI-compatible base URLs of servers orchard did not start (vLLM, SGLang, orchard serve),
    which rollouts call and which get the new weights after each update (`sync`). Empty: the
    policy is served in this process."""
    sync: Sync | None = None
    """How the servers get new weights: lora (adapters, vLLM's load_lora_adapter) or checkpoint
    (a whole model, SGLang's update_weights_from_disk). Needed with `policy_urls`."""
    api_key_env: str | None = None
    out: str
    harness: str = "chat"
    steps: int = Field(20, ge=1)
    tasks_per_step: int = Field(4, ge=1)
    group_size: int = Field(4, ge=2)
    sampling: Sampling = Field(default_factory=Sampling)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    eval_every: int = Field(0, ge=0)
    eval_attempts: int = Field(4, ge=1)
    save_every: int = Field(5, ge=1)
    workers: int = Field(1, ge=1)
    backend: str = "local"
    seed: int = 0
    shuffle_rewards: bool = False
    """A control run: rewards are shuffled across the step's episodes before advantages."""
    options: EpisodeOptions = Field(default_factory=lambda: EpisodeOptions(timeout_seconds=300, max_turns=10))
    resume: bool = False
    orchard_version: str = __version__


class RunState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    fingerprint: str
    status: Literal["running", "finished"] = "running"
    config: RLConfig
    step: int = 0


class StepRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    step: int
    tasks: list[str]
    episodes: int
    trainable: int
    mean_reward: float | None
    groups_with_signal: int
    loss: float
    grad_norm: float
    clipped: float
    kl: float | None
    logprob_gap: float | None
    tokens: int
    trained_tokens: int
    rollout_seconds: float
    update_seconds: float
    sync_seconds: float
    learner_tokens_per_s: float | None
    weight_version: int | None = None
    """The version pushed after this step's update (the weights the next step samples)."""
    served_versions: list[str] = Field(default_factory=list)
    """The weight versions the servers said produced this step's rollouts (empty when they do not say)."""


def fingerprint(config: RLConfig) -> str:
    fixed = config.model_dump(mode="json", exclude=_RESUMABLE | {"learner"})
    if fixed.get("sync") is None:  # as before there was a sync to choose
        fixed.pop("sync", None)
    for key in ("selection", "eval_selection"):  # as runs from before the selection grew hash it
        selection = getattr(config, key)
        fixed[key] = selection.stable_dump() if selection is not None else None
    learner = config.learner
    fixed["learner"] = learner.model_dump(mode="json", exclude={"threads", "shard", "grad_checkpointing"}
                                          | (set() if learner.lora else {"lora", "lora_r", "lora_alpha", "lora_dropout"}))
    if config.rollouts_file:
        fixed["rollouts_sha256"] = hashlib.sha256(Path(config.rollouts_file).read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:20]


def check_out(config: RLConfig, fp: str) -> RunState | None:
    """The state to resume, None for a fresh run; a folder that is not this run is refused."""
    out = Path(config.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is a file", hint="pass a new folder")
    if not out.exists() or not any(out.iterdir()):
        return None
    path = out / STATE_FILE
    if not path.is_file():
        raise UsageError(f"--out {out} exists and is not an orchard rl run (no {STATE_FILE})",
                         hint="pass a new or empty folder")
    try:
        state = RunState.model_validate(read_json(path))
    except ValueError as exc:
        raise UsageError(f"{path} is not an orchard rl state: {str(exc).splitlines()[0]}") from None
    if state.fingerprint != fp:
        raise UsageError(f"--out {out} holds another rl run (other tasks, model or settings)",
                         hint="pass a new folder, or the same arguments as that run with --resume")
    if not config.resume:
        raise UsageError(f"--out {out} already holds this run ({state.status}, step {state.step})",
                         hint="add --resume to continue it, or pass a new folder")
    return state
