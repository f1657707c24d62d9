"""What `orchard recipe claw|web` is asked to do: one typed config, written to DIR/recipe.json.

Every stage reads its own part (synth, distill, train, eval, control, rl) and turns it into the
config of the public command it drives (`lines.py` prints the equivalent command line).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchard_cli import __version__

Family = Literal["claw", "web"]
Device = Literal["auto", "cpu", "cuda"]
MAX_SEQ_LEN = {"claw": 2048, "web": 5120}
"""Training length by family: a claw episode with the bash agent is ~0.5-2k tokens; one call of
orchard's web agent carries a page of up to 12,000 characters (web-mini's gold calls: median 1,427
tokens, longest 4,585; none of their pages cut)."""
BUNDLED_SUITE = {"claw": "claw-mini", "web": "web-mini"}
"""The suite each family ships (claw-mini is synth seed 1, web-mini seed 7): kept apart by content."""


class SynthPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(40, ge=1, le=1000)
    """Training tasks (synthesized, validated three ways)."""
    seed: int = 11
    templates: list[str] | None = None
    """The templates trained on (None: every template of the family)."""
    exclude_templates: list[str] = Field(default_factory=list)
    heldout_n: int = Field(40, ge=1, le=1000)
    """Held-out tasks of the training templates (unseen seeds)."""
    heldout_seed: int = 12
    unseen_n: int = Field(0, ge=0, le=1000)
    """Held-out tasks of the templates NOT trained on (0: none)."""
    unseen_seed: int = 13


class DistillPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    teacher: str = "gold"
    """'gold' (the demonstrator: each task's reference played through the harness) or a model name."""
    base_url: str | None = None
    """The teacher's endpoint (a URL, or an in-package endpoint); None with teacher gold."""
    key_env: str | None = None
    attempts: int = Field(1, ge=1)


class TrainPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: int | None = Field(None, ge=1)
    """Optimizer steps (None: `epochs` passes over the demonstrations)."""
    epochs: int = Field(2, ge=1)
    lr: float = Field(5e-5, gt=0)
    max_seq_len: int | None = Field(None, ge=64)
    """Longest training sample in tokens (None: the family's, `MAX_SEQ_LEN`)."""
    batch_size: int = Field(1, ge=1)
    grad_accum: int = Field(1, ge=1)
    packing: bool = False
    """False: one demonstration per row (a step is `batch_size` x `grad_accum` episodes)."""
    lora: bool = False
    seed: int = 0
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    threads: int | None = Field(None, ge=1)


class EvalPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempts: int = Field(1, ge=1)
    """Attempts per held-out task (pass@k, pass^k); decoding is greedy at 1, sampled above."""
    temperature: float = Field(0.0, ge=0, le=2)
    """0: greedy (deterministic); attempts > 1 want a temperature above 0."""
    workers: int = Field(1, ge=1)
    max_turns: int = Field(8, ge=1)
    timeout: float = Field(300.0, gt=0)
    """Seconds one harness run may take."""
    max_reply_tokens: int = Field(192, ge=1)
    """Cap on one reply of the served student / base (the served model's default max_tokens)."""
    threads: int = Field(1, ge=1)


class ControlPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shuffled: bool = False
    """Also train a control student on the same demonstrations with each task's turns given to
    another task of the same template (same format, broken link to the task), and evaluate it."""
    near_miss: bool = False
    """Also distill each training task's near miss (the `near-miss` demonstrator: the family's
    near_miss played through the same harness: the task's procedure with a wrong last step),
    train a second control student on those demonstrations, and evaluate it."""
    seed: int = 0


class RLPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    steps: int = Field(8, ge=1)
    tasks_per_step: int = Field(2, ge=1)
    group_size: int = Field(4, ge=2)
    temperature: float = Field(1.0, ge=0, le=2)
    lr: float = Field(1e-6, gt=0)
    eval_every: int = Field(0, ge=0)
    eval_limit: int | None = Field(None, ge=1)
    """Held-out tasks of the RL curve (the first N of the held-out seeds; None: all)."""
    shuffled_control: bool = False
    """Also run the same RL with rewards shuffled across each step's episodes."""
    seed: int = 0


class RecipeConfig(BaseModel):
    """DIR/recipe.json: the whole recipe. Changing a part re-runs the stages that read it."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    family: Family
    out: str
    student: str = "smollm2"
    """The base model the student starts from: smollm2 or a checkpoint folder."""
    harness: str = "bash"
    device: Device = "auto"
    backend: str = "local"
    synth: SynthPart = Field(default_factory=SynthPart)
    distill: DistillPart = Field(default_factory=DistillPart)
    train: TrainPart = Field(default_factory=TrainPart)
    eval: EvalPart = Field(default_factory=EvalPart)
    control: ControlPart = Field(default_factory=ControlPart)
    rl: RLPart = Field(default_factory=RLPart)
    orchard_version: str = __version__

    @model_validator(mode="after")
    def _defaults(self) -> "RecipeConfig":
        if self.train.max_seq_len is None:
            self.train.max_seq_len = MAX_SEQ_LEN[self.family]
        return self

    @property
    def teacher_url(self) -> str:
        """The teacher's --base-url: gold's in-package endpoint, or what was given."""
        return self.distill.base_url or ("gold" if self.distill.teacher == "gold" else "")
