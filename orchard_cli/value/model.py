"""The value model: a frozen small LM (SmolLM2-135M by default) with a scalar head.

    p(resolved | problem, trajectory, patch) = sigmoid(w . z + b + prior_shift)
    z = [PCA_k(standardized hidden-state features), standardized scalar LM features]   (k = 0 by default)

The LM reads the episode (features.py); the head is a logistic regression over a
PCA-compressed view of the hidden states plus the LM's log-probability features, trained with
balanced class weights and L2. Why this form and not fine-tuning the LM: on a 2-core CPU one
SmolLM2 forward+backward step at 512 tokens takes 4-8 s, so a few minutes of fine-tuning is a
few dozen steps on a few dozen examples: it does not learn. Reading each episode once with the
frozen LM costs one forward pass, after which fitting the head takes well under a second and can
be redone (cross-validation, --init-from, the shuffled-label control) for free.

A model folder holds: value_model.json (this file's `ValueModelMeta`: base identity, feature
version and budget, what it was trained on), head.safetensors, experience.npz (the features and
labels it learnt from, so `--init-from` adds experience instead of starting over), metrics.json,
model_card.md, reliability.png.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchard_cli.errors import UsageError
from orchard_cli.value.data import Episode
from orchard_cli.value.features import COMPACT, FEATURE_VERSION, SCALARS, Featurizer
from orchard_cli.value.reading import Reading
from orchard_cli.value.ranking import calibrate, lbfgs, pairwise_weights

SCHEMA_VERSION = 1
META_FILE = "value_model.json"
HEAD_FILE = "head.safetensors"
EXPERIENCE_FILE = "experience.npz"


class BaseIdentity(BaseModel):
    """Which frozen LM the features come from: a head only fits the base it was trained on."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """'smollm2' or a checkpoint folder."""
    architecture: str
    hidden_size: int
    layers: int
    vocab_size: int
    fingerprint: str
    """sha256 of the architecture and of a sample of the weights: a fine-tuned checkpoint of the
    same architecture has another fingerprint."""


class HeadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pca: int = Field(0, ge=0)
    """Most principal components of the hidden-state features kept (fewer with few examples).
    0 by default: on experience sets of tens of tasks they fit the tasks, not the quality of the
    patches (held-out picks fell below random), while the log-probability features carry over."""
    l2: float = Field(0.1, ge=0)
    """L2 penalty on the head's weights (on the loss summed over examples of mean weight 1)."""
    neg_ratio: float = Field(1.0, gt=0)
    """Total weight of the negatives relative to the positives (1.0: balanced)."""
    max_steps: int = Field(200, ge=1)
    """L-BFGS iterations."""
    objective: Literal["pairwise", "pointwise"] = "pairwise"
    """pairwise: weights learnt from resolved/unresolved pairs of the same task, then one scale and
    bias calibrated pointwise (ranking.py); pointwise: a plain weighted logistic regression.
    Pairwise falls back to pointwise when no task has both outcomes."""
    features: Literal["compact", "all"] = "compact"
    """Which LM features the head reads: compact (features.COMPACT: gains, sizes, relevance) or
    all of features.SCALARS (adds the absolute log-probabilities)."""


class ValueModelMeta(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kind: str = "frozen-lm-logistic-head"
    base: BaseIdentity
    feature_version: int = FEATURE_VERSION
    max_tokens: int
    """Token budget of the main pass (problem + trajectory end + patch)."""
    precision: Literal["bf16", "fp32"] = "bf16"
    """How the base LM ran when it read the episodes (features must be read the same way)."""
    head: HeadConfig
    components: int = 0
    """PCA components actually kept."""
    prior_shift: float = 0.0
    """Added to the logit so probabilities match the training base rate (balanced weights move it)."""
    suites: list[str] = Field(default_factory=list)
    harnesses: list[str] = Field(default_factory=list)
    tasks: int = 0
    examples: int = 0
    positives: int = 0
    seed: int = 0
    init_from: str | None = None
    created_at: float = Field(default_factory=time.time)


# ---- the base ------------------------------------------------------------------------------------

def load_base(name: str, threads: int | None = None) -> Any:
    """The frozen LM (a `LocalModel`, loaded once per process by orchard's local model loader).
    The featurizer sets its own torch threads while it reads (`Reading.threads`)."""
    from orchard_cli.models.local_model import load_model

    return load_model(name, threads=threads)


ARCH_FIELDS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "intermediate_size", "vocab_size", "max_position_embeddings")


def base_identity(name: str, base: Any) -> BaseIdentity:
    import torch

    config = base.model.config
    digest = hashlib.sha256()
    digest.update(repr([getattr(config, f, None) for f in ARCH_FIELDS]).encode())
    params = list(base.model.named_parameters())
    with torch.no_grad():
        for _, param in params[:: max(1, len(params) // 8)]:
            digest.update(param.detach().float().reshape(-1)[:4096].numpy().tobytes())
    return BaseIdentity(name=name, architecture=type(base.model).__name__,
                        hidden_size=int(config.hidden_size), layers=int(config.num_hidden_layers),
                        vocab_size=int(config.vocab_size), fingerprint=digest.hexdigest()[:32])


def check_compatible(meta: ValueModelMeta, identity: BaseIdentity, where: str) -> None:
    if (meta.base.fingerprint != identity.fingerprint or meta.base.hidden_size != identity.hidden_size
            or meta.feature_version != FEATURE_VERSION):
        reason = ("feature version " f"{meta.feature_version} (this orchard reads {FEATURE_VERSION})"
                  if meta.feature_version != FEATURE_VERSION else
                  f"base {meta.base.name!r} ({meta.base.architecture}, hidden {meta.base.hidden_size}, "
                  f"fingerprint {meta.base.fingerprint[:12]}), not {identity.name!r} "
                  f"(hidden {identity.hidden_size}, fingerprint {identity.fingerprint[:12]})")
        raise UsageError(f"{where} was trained on {reason}: its head cannot read these features",
                         hint=f"use --model {meta.base.name}, or train a new value model")


# ---- the head ------------------------------------------------------------------------------------

class Head:
    """Standardize, project the hidden block onto its top principal components, logistic layer."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, basis: np.ndarray, weight: np.ndarray,
                 bias: float, hidden_dims: int) -> None:
        self.mean, self.std, self.basis = mean, std, basis
        self.weight, self.bias, self.hidden_dims = weight, float(bias), hidden_dims
        self.objective = "pointwise"
        """How fit_head fitted it (pairwise falls back to pointwise without within-task pairs)."""

    def project(self, features: np.ndarray) -> np.ndarray:
        x = (features - self.mean) / self.std
        return np.concatenate([x[:, :self.hidden_dims] @ self.basis.T, x[:, self.hidden_dims:]], axis=1)

    def logits(self, features: np.ndarray) -> np.ndarray:
        return self.project(features) @ self.weight + self.bias

    def tensors(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "std": self.std, "basis": self.basis, "weight": self.weight,
                "bias": np.asarray([self.bias], dtype=np.float32),
                "hidden_dims": np.asarray([self.hidden_dims], dtype=np.int64)}

    @classmethod
    def from_tensors(cls, t: dict[str, np.ndarray]) -> "Head":
        return cls(t["mean"], t["std"], t["basis"], t["weight"], float(t["bias"][0]),
                   int(t["hidden_dims"][0]))


def fit_head(features: np.ndarray, labels: Sequence[int], weights: Sequence[float], config: HeadConfig,
             hidden_dims: int, seed: int, init: Head | None = None, groups: Sequence[str] | None = None) -> Head:
    """Fit the head by L-BFGS: on within-task pairs (`groups`: the task of each example) then
    calibrated, or on the weighted logistic loss (config.objective). With `init`, its
    standardization and PCA basis are kept and its weights are the starting point."""
    import torch

    torch.manual_seed(seed)
    x = features.astype(np.float64)
    if init is not None:
        mean, std, basis = init.mean, init.std, init.basis
    else:
        mean = x.mean(0)
        std = np.maximum(x.std(0), 1e-6)
        hidden = ((x - mean) / std)[:, :hidden_dims]
        k = max(0, min(config.pca, len(x) // 6, hidden_dims, max(len(x) - 1, 1)))
        if k:
            _, _, vt = np.linalg.svd(hidden - hidden.mean(0), full_matrices=False)
            basis = vt[:k]
            if basis.shape[0] < k:
                basis = np.pad(basis, ((0, k - basis.shape[0]), (0, 0)))
        else:
            basis = np.zeros((0, hidden_dims))
    head = Head(mean.astype(np.float32), std.astype(np.float32), basis.astype(np.float32),
                np.zeros(basis.shape[0] + x.shape[1] - hidden_dims, dtype=np.float32), 0.0, hidden_dims)
    z_np = head.project(features).astype(np.float64)
    read = set(COMPACT if config.features == "compact" else SCALARS)
    mask = np.asarray([1.0] * basis.shape[0] + [float(name in read) for name in SCALARS])
    start = init.weight if init is not None and init.weight.shape[0] == z_np.shape[1] else None
    if config.objective == "pairwise" and groups is not None:
        order = pairwise_weights(z_np, labels, groups, l2=config.l2, steps=config.max_steps, mask=mask, init=start)
        if order is not None:
            scale, bias = calibrate(z_np @ order, labels, weights, config.max_steps)
            head.weight = (order * scale).astype(np.float32)
            head.bias = bias
            head.objective = "pairwise"
            return head
    z = torch.tensor(z_np, dtype=torch.float64)
    keep = torch.tensor(mask, dtype=torch.float64)
    y = torch.tensor(list(labels), dtype=torch.float64)
    w = torch.tensor(list(weights), dtype=torch.float64)
    weight = torch.zeros(z.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    if start is not None:
        with torch.no_grad():
            weight.copy_(torch.tensor(start, dtype=torch.float64))
            bias.fill_(init.bias)

    def loss() -> Any:
        kept = weight * keep
        logits = z @ kept + bias
        return ((w * torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")).sum()
                + 0.5 * config.l2 * (kept ** 2).sum())

    lbfgs([weight, bias], loss, config.max_steps)
    head.weight = (weight.detach() * keep).numpy().astype(np.float32)
    head.bias = float(bias.detach()[0])
    return head


def prior_shift(labels: Sequence[int], neg_ratio: float) -> float:
    """The logit correction that undoes class weighting: log(neg_ratio * n_pos / n_neg)."""
    n_pos = sum(1 for y in labels if y == 1)
    n_neg = len(labels) - n_pos
    if not n_pos or not n_neg:
        return 0.0
    return math.log(neg_ratio * n_pos / n_neg)


# ---- the model -----------------------------------------------------------------------------------

class ValueModel:
    """A head, the meta that says what it reads, and (lazily) the frozen base that reads."""

    def __init__(self, meta: ValueModelMeta, head: Head, base: Any = None) -> None:
        self.meta, self.head, self._base = meta, head, base
        self._featurizer: Featurizer | None = None
        self.reading = Reading()
        """Where and how its base reads episodes (set before the first `featurizer()` call)."""

    def featurizer(self) -> Featurizer:
        if self._featurizer is None:
            base = self._base if self._base is not None else load_base(self.meta.base.name,
                                                                       self.reading.torch_threads())
            check_compatible(self.meta, base_identity(self.meta.base.name, base), "the value model")
            self._featurizer = Featurizer(base, max_tokens=self.meta.max_tokens, fingerprint=self.meta.base.fingerprint,
                                          precision=self.meta.precision, spec=self.meta.base.name,
                                          reading=self.reading)
        return self._featurizer

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        logits = self.head.logits(features) + self.meta.prior_shift
        return 1.0 / (1.0 + np.exp(-np.clip(logits, -60, 60)))

    def score(self, episodes: Sequence[Episode], progress: Any = None) -> np.ndarray:
        """p(resolved) for each episode."""
        return self.probabilities(self.featurizer().features(episodes, progress))

    def save(self, folder: Path) -> None:
        from safetensors.numpy import save_file

        from orchard_cli.records import write_json

        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: np.ascontiguousarray(v) for k, v in self.head.tensors().items()}, str(folder / HEAD_FILE))
        write_json(folder / META_FILE, self.meta)

    @classmethod
    def load(cls, folder: str | Path, base: Any = None) -> "ValueModel":
        from safetensors.numpy import load_file

        from orchard_cli.records import read_json

        folder = Path(folder)
        if not (folder / META_FILE).is_file() or not (folder / HEAD_FILE).is_file():
            raise UsageError(f"{folder} is not a value model (no {META_FILE} / {HEAD_FILE})",
                             hint="train one with `orchard rerank train ... --out DIR`")
        try:
            meta = ValueModelMeta.model_validate(read_json(folder / META_FILE))
        except ValidationError as exc:
            raise UsageError(f"{folder / META_FILE} is not a value model this orchard can read "
                             f"({exc.errors()[0]['loc']}: {exc.errors()[0]['msg']})") from None
        if meta.schema_version != SCHEMA_VERSION:
            raise UsageError(f"{folder}: value model schema {meta.schema_version}, this orchard reads "
                             f"{SCHEMA_VERSION}")
        return cls(meta, Head.from_tensors(load_file(str(folder / HEAD_FILE))), base)


def save_experience(folder: Path, features: np.ndarray, labels: Sequence[int], tasks: Sequence[str],
                    digests: Sequence[str]) -> None:
    np.savez_compressed(folder / EXPERIENCE_FILE, features=features.astype(np.float32),
                        labels=np.asarray(labels, dtype=np.int8), tasks=np.asarray(tasks, dtype=str),
                        digests=np.asarray(digests, dtype=str))


def load_experience(folder: Path) -> dict[str, np.ndarray]:
    path = folder / EXPERIENCE_FILE
    if not path.is_file():
        raise UsageError(f"{folder} has no {EXPERIENCE_FILE}: it cannot be continued with --init-from")
    with np.load(path) as data:
        return {k: data[k] for k in ("features", "labels", "tasks", "digests")}


__all__ = ["SCALARS", "BaseIdentity", "HeadConfig", "ValueModel", "ValueModelMeta", "fit_head"]
