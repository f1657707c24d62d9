"""`orchard rerank train`: graded episodes -> a value model, measured on held-out tasks.

Steps: read the episodes (trajectories files and/or eval run folders); drop env/infra errors;
with `--init-from`, load the earlier model's experience and keep its head's basis; draw the
held-out TASKS (seeded); read every episode once with the frozen base LM; fit the head on the
training tasks with balanced class weights; measure it on the held-out tasks (AUC, ECE, Brier,
a reliability plot, best-of-N next to first / random / majority / shortest / oracle); write the
model folder, its metrics and its model card.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError
from orchard_cli.value import data, metrics
from orchard_cli.value.model import (
    HeadConfig,
    ValueModel,
    ValueModelMeta,
    base_identity,
    check_compatible,
    fit_head,
    load_base,
    load_experience,
    prior_shift,
    save_experience,
)
from orchard_cli.value.reading import Reading, ReadProgress

Say = Callable[[str], None]


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trajectories: list[str] = Field(default_factory=list)
    runs: list[str] = Field(default_factory=list)
    base_model: str = "smollm2"
    out: str
    init_from: str | None = None
    seed: int = 0
    holdout: float = Field(0.3, ge=0, lt=1)
    """Fraction of the (new) tasks held out for the metrics; 0 trains on everything."""
    fold: tuple[int, int] | None = None
    """(k, n): hold out the k-th of n folds of the tasks instead (cross-validation)."""
    max_tokens: int = Field(512, ge=64)
    precision: Literal["bf16", "fp32", "auto"] = "auto"
    """auto: the earlier model's (--init-from), else bf16 where the CPU has it natively, else fp32."""
    """bf16: the base LM reads under bfloat16 autocast (2-3x faster on CPUs with AMX)."""
    head: HeadConfig = Field(default_factory=HeadConfig)
    shuffle_labels: bool = False
    """A control: train on the training labels permuted (seeded). Its held-out metrics should
    sit at chance; if they do not, the evaluation leaks."""
    reading: Reading = Field(default_factory=Reading)
    """Where and how the base LM reads the episodes (device, workers, threads, the feature cache)."""


class SplitMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: int = 0
    examples: int = 0
    positives: int = 0
    auc: float | None = None
    ece: float | None = None
    brier: float | None = None
    best_of_n: dict[str, float] = Field(default_factory=dict)
    """Resolved rate per strategy over tasks, all candidates."""
    best_of_n_applying: dict[str, float] = Field(default_factory=dict)
    """The same among candidates whose patch is non-empty and applied, or that did something (an
    episode without a patch: a tool call or an answer); tasks with 2 or more."""
    applying_tasks: int = 0
    reliability: list[dict[str, float]] = Field(default_factory=list)


class TrainReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    out: str
    base: str
    episodes: int
    excluded_errors: int
    actions_episodes: int = 0
    """Episodes without a patch (claw), read from their actions."""
    train: SplitMetrics
    heldout: SplitMetrics
    heldout_tasks: list[str]
    feature_seconds: float
    fit_seconds: float
    candidates_per_second: float
    shuffled_labels: bool = False
    init_from: str | None = None
    reliability_png: str | None = None


def _read(config: TrainConfig) -> list[data.Episode]:
    if not config.trajectories and not config.runs:
        raise UsageError("nothing to learn from: give --trajectories FILE and/or --runs RUN_DIR")
    return data.episodes_from_trajectories(config.trajectories) + data.episodes_from_runs(config.runs)


def evaluate(episodes: list[data.Episode], probs: np.ndarray) -> SplitMetrics:
    labels = [ep.label or 0 for ep in episodes]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, ep in enumerate(episodes):
        groups[ep.task_key].append(i)
    every, applying = [], []
    for idx in groups.values():
        every.append(([episodes[i].output for i in idx], [labels[i] for i in idx], [float(probs[i]) for i in idx]))
        ok = [i for i in idx if episodes[i].applies]
        if len(ok) >= 2:
            applying.append(([episodes[i].output for i in ok], [labels[i] for i in ok], [float(probs[i]) for i in ok]))
    p = [float(x) for x in probs]
    return SplitMetrics(tasks=len(groups), examples=len(episodes), positives=sum(labels),
                        auc=metrics.auc(p, labels), ece=metrics.ece(p, labels), brier=metrics.brier(p, labels),
                        best_of_n=metrics.best_of_n(every), best_of_n_applying=metrics.best_of_n(applying),
                        applying_tasks=len(applying), reliability=metrics.reliability(p, labels))


def train_value_model(config: TrainConfig, say: Say = lambda _: None) -> TrainReport:
    out = Path(config.out)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"output folder {out} is not empty", hint="choose a new --out folder")
    earlier: ValueModel | None = None
    old: dict[str, np.ndarray] | None = None
    if config.init_from:
        if Path(config.init_from).resolve() == out.resolve():
            raise UsageError("--init-from and --out are the same folder", hint="write the continued model elsewhere")
        earlier = ValueModel.load(config.init_from)
        old = load_experience(Path(config.init_from))
    if config.precision == "auto":
        from orchard_cli.value.features import default_precision

        config = config.model_copy(update={"precision": earlier.meta.precision if earlier else default_precision()})
    episodes, dropped = data.labelled(_read(config))
    if not episodes:
        raise UsageError(f"no graded episodes to learn from ({dropped} env/infra error(s) excluded)")
    say(f"{len(episodes)} graded episode(s) from {len({e.task_key for e in episodes})} task(s); "
        f"{dropped} env/infra error(s) excluded")
    old_tasks = set(old["tasks"].tolist()) if old is not None else set()
    train_keys, held_keys = data.split_by_task({e.task_key for e in episodes}, config.holdout, config.seed,
                                               fixed_train=old_tasks, fold=config.fold)
    known = [int(v) for v in old["labels"]] if old is not None else []
    known += [e.label or 0 for e in episodes if e.task_key in train_keys]
    if len(set(known)) < 2:  # before minutes of loading the base model and reading every episode
        raise UsageError(f"the training tasks hold {sum(known)} resolved and {len(known) - sum(known)} unresolved "
                         "episode(s): a value model needs both", hint="add graded experience with both outcomes")
    base = load_base(config.base_model, config.reading.torch_threads())
    identity = base_identity(config.base_model, base)
    if earlier is not None:
        check_compatible(earlier.meta, identity, f"--init-from {config.init_from}")
        if earlier.meta.precision != config.precision:
            raise UsageError(f"--init-from {config.init_from} read its episodes in {earlier.meta.precision}, "
                             f"not --precision {config.precision}", hint=f"pass --precision {earlier.meta.precision}")
        if earlier.meta.max_tokens != config.max_tokens:
            raise UsageError(f"--init-from {config.init_from} reads {earlier.meta.max_tokens} tokens, "
                             f"not --max-input-tokens {config.max_tokens}",
                             hint=f"pass --max-input-tokens {earlier.meta.max_tokens}")
    from orchard_cli.value.features import Featurizer

    featurizer = Featurizer(base, max_tokens=config.max_tokens, fingerprint=identity.fingerprint,
                            precision=config.precision, spec=config.base_model, reading=config.reading)
    started = time.monotonic()
    progress = ReadProgress(f"reading with {config.base_model}")
    try:
        features = featurizer.features(episodes, progress)
    finally:
        progress.close()
    feature_seconds = time.monotonic() - started
    train_idx = [i for i, e in enumerate(episodes) if e.task_key in train_keys]
    held_idx = [i for i, e in enumerate(episodes) if e.task_key in held_keys]
    x = features[train_idx]
    y = [episodes[i].label or 0 for i in train_idx]
    tasks = [episodes[i].task_key for i in train_idx]
    digests = [episodes[i].digest() for i in train_idx]
    if old is not None:  # accumulated experience: what the earlier model learnt from, plus the new
        fresh = [j for j, d in enumerate(digests) if d not in set(old["digests"].tolist())]
        x = np.concatenate([old["features"], x[fresh]])
        y = [int(v) for v in old["labels"]] + [y[j] for j in fresh]
        tasks = old["tasks"].tolist() + [tasks[j] for j in fresh]
        digests = old["digests"].tolist() + [digests[j] for j in fresh]
    if not x.shape[0] or len(set(y)) < 2:
        raise UsageError(f"the training tasks hold {sum(y)} resolved and {len(y) - sum(y)} unresolved "
                         "episode(s): a value model needs both", hint="add graded experience with both outcomes")
    fit_labels = list(y)
    if config.shuffle_labels:
        random.Random(f"shuffle:{config.seed}").shuffle(fit_labels)
    started = time.monotonic()
    weights = data.balance_weights(fit_labels, config.head.neg_ratio)
    head = fit_head(x, fit_labels, weights, config.head, featurizer.hidden * 2, config.seed,
                    init=earlier.head if earlier is not None else None, groups=tasks)
    fit_seconds = time.monotonic() - started
    if head.objective != config.head.objective:
        say(f"no training task holds both a resolved and an unresolved episode: the head was fitted "
            f"{head.objective}, not {config.head.objective} (give tasks several graded attempts)")
    meta = ValueModelMeta(
        base=identity, max_tokens=config.max_tokens, precision=config.precision, head=config.head.model_copy(update={"objective": head.objective}),
        components=int(head.basis.shape[0]),
        prior_shift=prior_shift(fit_labels, config.head.neg_ratio),
        suites=sorted({t.split("::")[0] for t in tasks}),
        harnesses=sorted(({e.harness for e in episodes if e.harness}
                          | set(earlier.meta.harnesses if earlier else []))),
        tasks=len(set(tasks)), examples=len(y), positives=int(sum(y)), seed=config.seed,
        init_from=str(Path(config.init_from).resolve()) if config.init_from else None)
    model = ValueModel(meta, head, base)
    model._featurizer = featurizer
    train_metrics = evaluate([episodes[i] for i in train_idx], model.probabilities(features[train_idx]))
    held = [episodes[i] for i in held_idx]
    held_probs = model.probabilities(features[held_idx]) if held_idx else np.zeros(0)
    held_metrics = evaluate(held, held_probs)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out)
    save_experience(out, x, y, tasks, digests)
    png = None
    if held_idx and metrics.reliability_png(out / "reliability.png", list(map(float, held_probs)),
                                            [e.label or 0 for e in held],
                                            f"held-out tasks: {held_metrics.tasks}, candidates: {len(held)}"):
        png = str(out / "reliability.png")
    report = TrainReport(
        out=str(out), base=config.base_model, episodes=len(episodes), excluded_errors=dropped,
        actions_episodes=sum(1 for e in episodes if e.actions is not None),
        train=train_metrics, heldout=held_metrics, heldout_tasks=sorted(held_keys),
        feature_seconds=round(feature_seconds, 2), fit_seconds=round(fit_seconds, 3),
        candidates_per_second=round(featurizer.computed / feature_seconds, 3) if featurizer.computed else 0.0,
        shuffled_labels=config.shuffle_labels, init_from=meta.init_from, reliability_png=png)
    from orchard_cli.records import write_json, write_text
    from orchard_cli.value.card import model_card

    write_json(out / "metrics.json", report)
    write_json(out / "split.json", {"schema_version": 1, "seed": config.seed, "holdout": config.holdout,
                                     "fold": list(config.fold) if config.fold else None,
                                     "train": sorted(train_keys), "heldout": sorted(held_keys)})
    write_text(out / "model_card.md", model_card(meta, report))
    return report


__all__ = ["TrainConfig", "TrainReport", "evaluate", "train_value_model"]
