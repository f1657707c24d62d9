"""The configuration of a training run, and the run folder's rules.

`--out DIR` is the run folder and, at the end, the checkpoint: it must not exist, be empty, or hold
this very run (`orchard_train.json` with the same fingerprint: same data files, base model,
builder, filters and hyper-parameters). A folder holding this run is continued with `--resume`
from its latest checkpoint (DIR/checkpoints/step-N); anything else is refused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.records import read_json
from orchard_cli.training.turns import EpisodeFilter
from orchard_cli.training.parallel import Shard
from orchard_cli.training.samples import Builder, TokenIds

STATE_FILE = "orchard_train.json"
SCHEMA_VERSION = 1
Precision = Literal["auto", "fp32", "bf16"]
# Fields that may change between a run and its resumption.
# The engine (--shard) and activation checkpointing change how a step is computed, not what it
# computes: a run continues with other values, in another number of processes.
_RESUMABLE = {"out", "resume", "threads", "save_every", "merge", "max_steps", "epochs",
              "eval_suite", "allow_overlap", "shard", "grad_checkpointing"}


class TrainConfig(BaseModel):
    """Everything `orchard train` was asked to do. Written to DIR/orchard_train.json."""

    model_config = ConfigDict(extra="forbid")

    trajectories: list[str]
    base_model: str
    out: str
    builder: Builder = "per-call"
    filters: EpisodeFilter = Field(default_factory=EpisodeFilter)
    token_ids: TokenIds = "auto"
    """'auto': train on recorded token ids when they are the base model's; 'never': always render."""
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1)
    """Stop after this many optimizer steps (overrides epochs)."""
    lr: float | None = Field(None, gt=0)
    """Peak learning rate; default 2e-5 (full) or 2e-4 (LoRA)."""
    warmup_ratio: float = Field(0.03, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    max_seq_len: int = Field(2048, ge=16)
    batch_size: int = Field(1, ge=1)
    """Rows per micro-batch (a packed row holds several samples)."""
    grad_accum: int = Field(1, ge=1)
    packing: bool = True
    lora: bool = False
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    merge: bool = False
    """LoRA only: merge the adapter into the base weights and save a whole model."""
    seed: int = 0
    threads: int | None = Field(None, ge=1)
    precision: Precision = "auto"
    shard: Shard = "auto"
    """Under torchrun: full (FSDP2: parameters, gradients and optimizer state sharded; the default
    with several processes), grad-op (FSDP2 keeping gathered weights from forward to backward) or
    none (DDP: every process holds the whole model). One process shards nothing."""
    grad_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~1/3 more compute)."""
    save_every: int = Field(100, ge=1)
    """Optimizer steps between resumable checkpoints."""
    val_fraction: float = Field(0.0, ge=0, lt=1)
    """Share of episodes held out to report a validation loss (0: none)."""
    eval_suite: str | None = None
    allow_overlap: bool = False
    resume: bool = False

    @property
    def peak_lr(self) -> float:
        return self.lr if self.lr is not None else (2e-4 if self.lora else 2e-5)


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fingerprint(config: TrainConfig) -> str:
    """What makes two invocations the same run: the data's bytes and the fixed settings."""
    fixed = config.model_dump(mode="json", exclude=_RESUMABLE | {"trajectories"})
    data = sorted(_file_digest(p) for p in config.trajectories)
    raw = json.dumps({"config": fixed, "data": data}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


class RunState(BaseModel):
    """DIR/orchard_train.json: the run's identity, progress and, when finished, its results."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    fingerprint: str
    status: Literal["running", "finished"] = "running"
    config: TrainConfig
    step: int = 0
    total_steps: int = 0
    result: dict[str, Any] = Field(default_factory=dict)


def check_out_dir(config: TrainConfig, fp: str) -> RunState | None:
    """The run state to resume from, None for a fresh start; UsageError when DIR is not ours."""
    out = Path(config.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is a file", hint="pass a new folder")
    if not out.exists() or not any(out.iterdir()):
        return None
    state_path = out / STATE_FILE
    if not state_path.is_file():
        raise UsageError(f"--out {out} exists and is not a checkpoint of this run (no {STATE_FILE})",
                         hint="pass a new or empty folder")
    try:
        state = RunState.model_validate(read_json(state_path))
    except ValueError as exc:
        raise UsageError(f"{state_path} is not a training run state: {str(exc).splitlines()[0]}",
                         hint="pass a new or empty folder") from None
    if state.fingerprint != fp:
        raise UsageError(f"--out {out} holds another training run (other data, base model or settings)",
                         hint="pass a new folder, or the same arguments as that run with --resume")
    if not config.resume:
        raise UsageError(f"--out {out} already holds this run ({state.status}, step {state.step} of "
                         f"{state.total_steps})", hint="add --resume to continue it, or pass a new folder")
    return state
