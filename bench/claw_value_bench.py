"""Value model on claw episodes (no patch): best-of-N on held-out claw-mini tasks.

  candidates  per task, by scripted solvers (seeded): the gold solution, the task's near miss,
              null (nothing done), and variants of the gold: drop_call (one tool call left out),
              cut_answer (the answer cut in half), repeat_call (one tool call made twice);
              identical candidates once. Whether a candidate resolves is never assumed: the
              task's checks decide.
  grading     the candidates of each task are shuffled over N slots (seeded, as `orchard rerank
              candidates` does); slot K is one `orchard eval` run folder written by the rollout
              core (EvalRun + Pool) on the local backend: real services, real checks.
  training    `orchard rerank train`'s own function on those run folders (the episodes read back
              from results.jsonl + evidence.json), --holdout of the TASKS held out (seeded).
  report      on the held-out tasks: the resolved rate of the candidate each strategy picks (first
              = slot 1, random = expected value of a uniform pick, majority / shortest over the
              rendered actions, value model, oracle = pass@N), AUC; then controls on the same
              features: shuffled training labels, other split seeds, whole categories held out.

Usage: .venv/bin/python bench/claw_value_bench.py [--seed 0] [--holdout 0.4] [--max-tokens 384]
         [--work DIR] [--threads 1] [--splits 10]
--work keeps the graded runs (a second run reuses them) and the trained model.
Needs bubblewrap (the local backend) and the embedded model (scripts/install-model.sh).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
SUITE = "claw-mini"
KINDS = ("gold", "near_miss", "null", "drop_call", "cut_answer", "repeat_call")
SHOWN = (("first", "first (slot 1)"), ("random", "random (expected)"), ("majority", "majority (same actions)"),
         ("shortest", "shortest (rendered actions)"), ("value", "value model"), ("oracle", "oracle (pass@N)"))


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---- candidates -------------------------------------------------------------------------------

def candidates(family: Any, task: Any, seed: int) -> list[tuple[str, Any]]:
    """(kind, Gold) of one task, gold first, identical ones once."""
    from orchard_cli.family import Gold
    from orchard_cli.rollout.choose import reference

    rng = random.Random(f"claw-candidates:{seed}:{task.task_id}")
    gold = reference(family, task, None, "gold")
    out = [("gold", gold), ("near_miss", reference(family, task, None, "near_miss")), ("null", Gold())]
    calls = list(gold.tool_calls)
    if calls:
        i = rng.randrange(len(calls))
        out.append(("drop_call", gold.model_copy(update={"tool_calls": calls[:i] + calls[i + 1:]})))
    if gold.answer:
        out.append(("cut_answer", gold.model_copy(update={"answer": gold.answer[:len(gold.answer) // 2].rstrip()})))
    if calls:
        i = rng.randrange(len(calls))
        out.append(("repeat_call", gold.model_copy(update={"tool_calls": calls[:i + 1] + calls[i:]})))
    seen, unique = set(), []
    for kind, solution in out:
        key = solution.model_dump_json()
        if key not in seen:
            seen.add(key)
            unique.append((kind, solution))
    return unique


def graded_runs(work: Path, seed: int, workers: int) -> tuple[list[Path], dict[str, list[str]]]:
    """The slot run folders (graded now, or found in --work) and task -> kind per slot."""
    from orchard_cli.rollout.eval_run import EvalConfig, EvalRun
    from orchard_cli.rollout.solvers import GoldSolver
    from orchard_cli.tasks.registry import load_suite

    family, tasks = load_suite(SUITE)
    sets = {t.task_id: candidates(family, t, seed) for t in tasks}
    slots = max(len(c) for c in sets.values())
    order = {}
    for task_id, cands in sets.items():
        index = list(range(len(cands)))
        random.Random(f"slots:{seed}:{task_id}").shuffle(index)
        order[task_id] = index
    kinds = {task_id: [sets[task_id][i][0] for i in index] for task_id, index in order.items()}

    class SlotSolver(GoldSolver):
        """Replays the candidate each task has in this slot (a scripted solver: tool calls,
        commands, answer, through the task's real tools)."""

        name = harness = model = "scripted"

        def __init__(self, slot: int) -> None:
            super().__init__(family)
            self.slot = slot

        def replayed(self, context: Any) -> Any:
            task = context.task
            return sets[task.task_id][order[task.task_id][self.slot]][1]

    runs = []
    for slot in range(slots):
        out = work / "runs" / f"slot-{slot + 1}"
        runs.append(out)
        if (out / "scorecard.json").is_file():
            continue
        chosen = [t for t in tasks if slot < len(sets[t.task_id])]
        config = EvalConfig(suite=SUITE, instances=[t.task_id for t in chosen], source=f"scripted:slot-{slot + 1}",
                            backend="local", workers=workers, out=str(out))
        started = time.monotonic()
        card = EvalRun(config, family, chosen, SlotSolver(slot), out, resume=False).execute()
        say(f"slot {slot + 1}/{slots}: {len(chosen)} episode(s), {card.resolved} resolved, "
            f"{time.monotonic() - started:.0f}s")
    return runs, kinds


# ---- fitting on cached features (controls) ----------------------------------------------------

def fit_score(x: Any, episodes: list[Any], train: set[str], held: set[str], seed: int, hidden: int,
              shuffle: bool = False) -> Any:
    """What `rerank train` fits and measures, on features already read: the held-out SplitMetrics."""
    import numpy as np

    from orchard_cli.value import data
    from orchard_cli.value.model import HeadConfig, fit_head, prior_shift
    from orchard_cli.value.train import evaluate

    tr = [i for i, e in enumerate(episodes) if e.task_key in train]
    he = [i for i, e in enumerate(episodes) if e.task_key in held]
    y = [episodes[i].label or 0 for i in tr]
    if shuffle:
        random.Random(f"shuffle:{seed}").shuffle(y)
    config = HeadConfig()
    head = fit_head(x[tr], y, data.balance_weights(y, config.neg_ratio), config, hidden, seed,
                    groups=[episodes[i].task_key for i in tr])
    logits = head.logits(x[he]) + prior_shift(y, config.neg_ratio)
    return evaluate([episodes[i] for i in he], 1.0 / (1.0 + np.exp(-np.clip(logits, -60, 60))))


def most_calls(episodes: list[Any], held: set[str], slot_of: dict[str, int]) -> float:
    """A count baseline: the resolved rate of the candidate with the most tool calls (ties: the
    earliest slot). What the value model must beat to show it reads more than a count."""
    groups: dict[str, list[Any]] = defaultdict(list)
    for e in episodes:
        if e.task_key in held:
            groups[e.task_key].append(e)
    picked = [max(sorted(c, key=lambda e: slot_of[e.origin]), key=lambda e: len(e.actions.calls) if e.actions else 0)
              for c in groups.values()]
    return sum(e.resolved for e in picked) / len(picked) if picked else 0.0


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:5.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--holdout", type=float, default=0.4)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--work", type=Path, default=Path("/tmp/orchard-claw-value-bench"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--splits", type=int, default=10, help="task-split seeds for the spread")
    args = parser.parse_args()
    command = (".venv/bin/python bench/claw_value_bench.py " + " ".join(
        shlex.quote(a) for a in ("--seed", str(args.seed), "--holdout", str(args.holdout), "--max-tokens",
                                 str(args.max_tokens), "--threads", str(args.threads), "--splits", str(args.splits),
                                 "--work", str(args.work))))
    from orchard_cli.value import data
    from orchard_cli.value.features import COMPACT, SCALARS, Featurizer
    from orchard_cli.value.model import ValueModel, base_identity, load_base
    from orchard_cli.value.train import TrainConfig, train_value_model
    from orchard_cli.value.reading import Reading

    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    runs, kinds = graded_runs(args.work, args.seed, args.workers)
    grading = time.monotonic() - started
    episodes = data.episodes_from_runs(runs)
    slot_of = {str(r): k for k, r in enumerate(runs)}
    kind_of = {id(e): kinds[e.task_id][slot_of[e.origin]] for e in episodes}
    model_dir = args.work / f"model-seed{args.seed}-h{args.holdout}-t{args.max_tokens}"
    if model_dir.exists():
        import shutil

        shutil.rmtree(model_dir)
    started = time.monotonic()
    report = train_value_model(TrainConfig(runs=[str(r) for r in runs], out=str(model_dir), seed=args.seed,
                                           holdout=args.holdout, max_tokens=args.max_tokens,
                                           reading=Reading(threads=args.threads, cache=False)),
                               say=say)
    training = time.monotonic() - started
    model = ValueModel.load(model_dir)
    held_keys = set(report.heldout_tasks)

    # the same features again (the process's cache) for the controls
    base = load_base("smollm2", args.threads)
    featurizer = Featurizer(base, max_tokens=args.max_tokens, fingerprint=base_identity("smollm2", base).fingerprint,
                            precision=model.meta.precision)
    labelled, _ = data.labelled(episodes)
    x = featurizer.features(labelled)
    keys = sorted({e.task_key for e in labelled})
    hidden = featurizer.hidden * 2
    again = fit_score(x, labelled, set(keys) - held_keys, held_keys, args.seed, hidden)
    probs = model.probabilities(x)
    score_of = {id(e): float(p) for e, p in zip(labelled, probs)}

    lines = [f"command: {command}", ""]
    outcomes = Counter(e.category for e in episodes)
    lines.append(f"{SUITE}: {len({e.task_id for e in episodes})} tasks, {len(episodes)} candidates over {len(runs)} "
                 f"slot runs; outcomes: {', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))}; "
                 f"graded in {grading:.0f}s, read + trained in {training:.0f}s "
                 f"({report.candidates_per_second:.2f} candidates/s, {model.meta.precision}, "
                 f"{args.max_tokens} tokens, {args.threads} thread(s))")
    by_kind: dict[str, list[int]] = defaultdict(list)
    for e in labelled:
        by_kind[kind_of[id(e)]].append(int(e.resolved))
    lines.append("resolved by kind: " + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in
                                                    sorted(by_kind.items(), key=lambda kv: KINDS.index(kv[0]))))
    held = report.heldout
    lines += ["", f"held-out: {held.tasks} tasks ({held.examples} candidates, {held.positives} resolved); "
              f"trained on {report.train.tasks} tasks ({report.train.examples} candidates); split seed {args.seed}", "",
              "| strategy | held-out resolved rate |", "| --- | ---: |"]
    lines += [f"| {label} | {pct(held.best_of_n.get(s))} |" for s, label in SHOWN[:4]]
    lines.append(f"| most tool calls | {pct(most_calls(labelled, held_keys, slot_of))} |")
    lines += [f"| {label} | {pct(held.best_of_n.get(s))} |" for s, label in SHOWN[4:]]
    lines += ["", f"AUC held-out {held.auc:.3f} (training {report.train.auc:.3f}); ECE held-out {held.ece:.3f}; "
              f"Brier {held.brier:.3f}; head {model.meta.head.objective}, {model.meta.head.features} features"]
    lines.append(f"(refit on the cached features reproduces it: value {pct(again.best_of_n['value'])}, "
                 f"AUC {again.auc:.3f})")

    picks = Counter()
    groups: dict[str, list[Any]] = defaultdict(list)
    for e in labelled:
        if e.task_key in held_keys:
            groups[e.task_key].append(e)
    for cands in groups.values():
        cands.sort(key=lambda e: slot_of[e.origin])
        top = max(score_of[id(e)] for e in cands)
        best = next(e for e in cands if score_of[id(e)] == top)
        picks[(kind_of[id(best)], best.resolved)] += 1
    lines.append("value model's held-out picks by kind: " + ", ".join(
        f"{k} {picks[(k, True)] + picks[(k, False)]} ({picks[(k, True)]} resolved)"
        for k in KINDS if picks[(k, True)] + picks[(k, False)]))

    # controls on the same features
    shuffled = [fit_score(x, labelled, set(keys) - held_keys, held_keys, s, hidden, shuffle=True) for s in range(5)]
    lines += ["", "controls (same features, the head refitted):",
              f"- shuffled training labels (5 seeds): value {pct(statistics.mean(m.best_of_n['value'] for m in shuffled))}, "
              f"AUC {statistics.mean(m.auc for m in shuffled if m.auc is not None):.3f} (random "
              f"{pct(shuffled[0].best_of_n['random'])})"]
    spread, counted = [], []
    for s in range(args.splits):
        train_keys, held_s = data.split_by_task(keys, args.holdout, s)
        spread.append(fit_score(x, labelled, train_keys, held_s, s, hidden))
        counted.append(most_calls(labelled, held_s, slot_of))
    gaps = [m.best_of_n["value"] - m.best_of_n["random"] for m in spread]
    lines.append(f"- {args.splits} task-split seeds: value {pct(statistics.mean(m.best_of_n['value'] for m in spread))} "
                 f"(min {pct(min(m.best_of_n['value'] for m in spread))}), random "
                 f"{pct(statistics.mean(m.best_of_n['random'] for m in spread))}, most calls "
                 f"{pct(statistics.mean(counted))}, first "
                 f"{pct(statistics.mean(m.best_of_n['first'] for m in spread))}, oracle "
                 f"{pct(statistics.mean(m.best_of_n['oracle'] for m in spread))}; value - random "
                 f"{100 * statistics.mean(gaps):+.1f} points (min {100 * min(gaps):+.1f}); AUC "
                 f"{statistics.mean(m.auc for m in spread):.3f}")
    categories = sorted({e.task_id.rsplit("-", 1)[0] for e in labelled})
    rows, counted = [], []
    for category in categories:
        held_c = {k for k in keys if k.split("::", 1)[1].rsplit("-", 1)[0] == category}
        m = fit_score(x, labelled, set(keys) - held_c, held_c, args.seed, hidden)
        rows.append((category, m))
        counted.append(most_calls(labelled, held_c, slot_of))
    lines.append(f"- each category held out in turn ({len(categories)} x 4 tasks, trained on the other "
                 f"{len(categories) - 1}): value {pct(statistics.mean(m.best_of_n['value'] for _, m in rows))}, "
                 f"random {pct(statistics.mean(m.best_of_n['random'] for _, m in rows))}, most calls "
                 f"{pct(statistics.mean(counted))}, first "
                 f"{pct(statistics.mean(m.best_of_n['first'] for _, m in rows))}, oracle "
                 f"{pct(statistics.mean(m.best_of_n['oracle'] for _, m in rows))}")
    lines.append("  " + ", ".join(f"{c} {pct(m.best_of_n['value']).strip()}" for c, m in rows))
    weights = model.head.weight[model.head.basis.shape[0]:]
    shown = sorted(((abs(w), name, w) for name, w in zip(SCALARS, weights) if name in COMPACT and w), reverse=True)
    lines += ["", "head weights (standardized features, main model): "
              + ", ".join(f"{name} {w:+.2f}" for _, name, w in shown)]
    (args.work / "report.md").write_text("\n".join(lines) + "\n")
    (args.work / "report.json").write_text(json.dumps(report.model_dump(), indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
