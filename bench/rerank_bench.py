"""Value-model reranking benchmark: best-of-N on held-out tasks, and scoring throughput.

  best-of-N    candidates per task made by `orchard rerank candidates` (gold, near misses,
               unrelated edit, empty; --near-misses 5 gives 8), graded by `orchard eval
               --predictions` in sandboxes; K-fold cross-fitting by task (`rerank train
               --fold k/K`, K = --folds, 4 by default: each task is scored by the model that did
               not see it). For N = 1, 2, 4, 8: the resolved rate of first / random / majority /
               shortest patch / value / oracle, averaged over
               tasks and over DRAWS seeded draws of N of each task's candidates (candidates whose
               patch is empty or did not apply are dropped before picking when others are left,
               as `rerank apply` does; `first` is the first drawn, unfiltered). Table + PNG.
  reading      episodes read per second, the featurizer of --baseline-commit (loaded from git: one
               padded pass per episode, batches of 4; as shipped with 1 torch thread, and with
               every core) against today's (shared prefixes, unpadded passes, every core), on the
               same episodes in one run, no feature cache; the largest difference between their
               rows; and the best-of-N table once from each one's rows (same heads, same folds).
  throughput   candidates scored per second on the CPU (fresh feature cache), for trajectories
               of growing length, at two token budgets.

Usage: .venv/bin/python bench/rerank_bench.py [--suite swe-mini] [--tasks 30] [--near-misses 5]
         [--folds 4] [--objective pairwise|pointwise] [--work DIR] [--draws 200] [--skip-throughput]
         [--baseline-commit cfac927] [--skip-baseline]
--work keeps candidates, runs and models; a second run reuses graded runs found there.
Needs bubblewrap, PyPI (sdists, environments) and the embedded model.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
NS = (1, 2, 4, 8)
SHOWN = ("first", "random", "majority", "shortest", "value", "oracle")


def cli(*args: str) -> int:
    from orchard_cli.main import main

    code = main(list(args))
    if code != 0:
        raise SystemExit(f"orchard {' '.join(args[:3])} ... exited {code}")
    return code


def graded_runs(suite: str, tasks: int, near: int, work: Path) -> tuple[list[str], list[Path]]:
    from orchard_cli.tasks.registry import load_suite

    from orchard_cli.value.candidates_io import pick_tasks

    _, all_tasks = load_suite(suite)
    ids = pick_tasks(all_tasks, tasks)
    cands = work / "cands"
    if not (cands / "kinds.json").is_file():
        cli("rerank", "candidates", suite, "--instances", ",".join(ids), "--near-misses", str(near),
            "--out", str(cands))
    runs = []
    for path in sorted(cands.glob("candidates-*.jsonl"), key=lambda p: int(p.stem.split("-")[1])):
        out = work / "runs" / path.stem
        if not (out / "scorecard.json").is_file():
            cli("eval", suite, "--instances", ",".join(ids), "--predictions", str(path), "--out", str(out),
                "--workers", "2", "--resume")
        runs.append(out)
    return ids, runs


def cross_fit_scores(runs: list[Path], work: Path, max_tokens: int, folds: int = 4,
                     objective: str = "pairwise", tag: str = "") -> dict[str, list[dict]]:
    """task -> candidates [{patch, resolved, applies, score}] in run order, each task scored by
    the model of the fold that held it out."""
    from orchard_cli.value import data
    from orchard_cli.value.model import ValueModel

    episodes = data.episodes_from_runs(runs)
    by_task: dict[str, list[dict]] = defaultdict(list)
    for k in range(1, folds + 1):
        model_dir = work / f"model{tag}-{objective}-{k}of{folds}"
        if not (model_dir / "value_model.json").is_file():
            cli("rerank", "train", *[a for r in runs for a in ("--runs", str(r))], "--fold", f"{k}/{folds}",
                "--max-input-tokens", str(max_tokens), "--objective", objective, "--out", str(model_dir))
        held = set(json.loads((model_dir / "split.json").read_text())["heldout"])
        mine = [ep for ep in episodes if ep.task_key in held and ep.label is not None]
        scores = ValueModel.load(model_dir).score(mine)
        for ep, score in zip(mine, scores):
            by_task[ep.task_key].append({"patch": ep.patch, "resolved": int(ep.resolved),
                                         "applies": ep.applies, "score": float(score)})
    return by_task


def best_of_n(by_task: dict[str, list[dict]], draws: int, seed: int = 0) -> dict[int, dict[str, float]]:
    from orchard_cli.value.metrics import pick

    rng = random.Random(seed)
    table: dict[int, dict[str, float]] = {}
    for n in NS:
        totals = defaultdict(float)
        count = 0
        for task in sorted(by_task):
            cands = by_task[task]
            if len(cands) < n:
                continue
            for _ in range(draws):
                drawn = rng.sample(cands, n)
                pool = [c for c in drawn if c["applies"]] or drawn
                patches, scores = [c["patch"] for c in pool], [c["score"] for c in pool]
                totals["first"] += drawn[0]["resolved"]
                totals["random"] += sum(c["resolved"] for c in pool) / len(pool)
                totals["majority"] += pool[pick("majority", patches)]["resolved"]
                totals["shortest"] += pool[pick("shortest", patches)]["resolved"]
                totals["value"] += pool[pick("value", patches, scores)]["resolved"]
                totals["oracle"] += float(any(c["resolved"] for c in drawn))
                count += 1
        table[n] = {s: totals[s] / count for s in SHOWN} if count else {}
        table[n]["tasks"] = count // draws if count else 0
    return table


def plot(table: dict[int, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    styles = {"oracle": ("#98a2b3", "--"), "value": ("#2f9e62", "-"), "majority": ("#e2a03f", "-"),
              "random": ("#8b95a7", ":"), "first": ("#9b6fd0", "-."), "shortest": ("#4c7bd9", "-.")}
    ns = [n for n in NS if table.get(n)]
    for s in SHOWN:
        color, ls = styles[s]
        ax.plot(ns, [100 * table[n][s] for n in ns], marker="o", color=color, ls=ls, label=s)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("candidates per task (N)")
    ax.set_ylabel("resolved rate, held-out tasks (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    ax.set_title("best of N: which candidate each strategy picks", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def baseline_module(commit: str) -> Any:
    """features.py as it was at `commit`, loaded from git as a module of its own."""
    import subprocess
    import types

    source = subprocess.run(["git", "-C", str(HERE), "show", f"{commit}:orchard_cli/value/features.py"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("baseline_features")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    exec(compile(source, f"{commit}:orchard_cli/value/features.py", "exec"), module.__dict__)
    return module


def reading_speed(runs: list[Path], max_tokens: int, commit: str) -> tuple[list[dict], dict[str, Any]]:
    """Rows per second of the baseline featurizer and of today's on the runs' graded episodes."""
    import numpy as np
    import torch

    from orchard_cli.value import data, features
    from orchard_cli.value.model import base_identity, load_base
    from orchard_cli.value.reading import Reading

    episodes, _ = data.labelled(data.episodes_from_runs(runs))
    unique = list({ep.digest(): ep for ep in episodes}.values())
    base = load_base("smollm2")
    fingerprint = base_identity("smollm2", base).fingerprint
    precision = features.default_precision()
    cores = len(__import__("os").sched_getaffinity(0))
    old = baseline_module(commit)
    rows, made = [], {}
    for label, threads in ((f"{commit} (1 thread, as shipped)", 1), (f"{commit} ({cores} threads)", cores)):
        torch.set_num_threads(threads)
        old.clear_cache()
        reader = old.Featurizer(base, max_tokens=max_tokens, fingerprint=fingerprint, precision=precision)
        started = time.monotonic()
        made[label] = reader.features(unique)
        rows.append({"featurizer": label, "seconds": time.monotonic() - started})
        print(f"  {label}: {len(unique) / rows[-1]['seconds']:.3f} episodes/s", file=sys.stderr)
    features.clear_cache()
    reader = features.Featurizer(base, max_tokens=max_tokens, fingerprint=fingerprint, precision=precision,
                                 spec="smollm2", reading=Reading(cache=False))
    started = time.monotonic()
    made["today"] = reader.features(unique)
    rows.append({"featurizer": f"today ({reader.reading.torch_threads()} threads)", "seconds": time.monotonic() - started})
    first = rows[0]["seconds"]
    for row in rows:
        row.update(episodes=len(unique), per_second=len(unique) / row["seconds"], speedup=first / row["seconds"])
    before = next(iter(made.values()))
    rel = float((np.abs(made["today"] - before) / (1e-3 + np.abs(before))).max())
    keys = [reader.key(ep) for ep in unique]
    return rows, {"before": dict(zip(keys, before)), "after": dict(zip(keys, made["today"])), "max_rel_diff": rel}


def throughput(model_dir: Path, runs: list[Path], budgets: tuple[int, ...] = (512, 1024)) -> list[dict]:
    """Candidates per second for episodes whose trajectory is padded to L tokens of real text."""
    from orchard_cli.value import data, features
    from orchard_cli.value.features import Featurizer
    from orchard_cli.value.model import ValueModel, load_base

    model = ValueModel.load(model_dir)
    base = load_base(model.meta.base.name)
    sample = [ep for ep in data.episodes_from_runs(runs[:1]) if ep.patch.strip()][:8]
    filler = "\n".join(f"[tool] {line}" for line in Path(HERE / "orchard_cli" / "value" / "features.py").read_text().splitlines())
    rows = []
    for budget in budgets:
        featurizer = Featurizer(base, max_tokens=budget, fingerprint=model.meta.base.fingerprint,
                                precision=model.meta.precision)
        for length in (0, 256, 1024, 4096):
            ids = featurizer._encode(filler)[0][:length]
            text = base.tokenizer.decode(ids) if length else ""
            eps = [ep.model_copy(update={"trajectory": text}) for ep in sample]
            features.clear_cache()
            started = time.monotonic()
            featurizer.features(eps)
            seconds = time.monotonic() - started
            read = len(featurizer.encode(eps[0])["ids"])
            rows.append({"budget": budget, "trajectory_tokens": length, "tokens_read": read,
                         "candidates_per_second": len(eps) / seconds})
            print(f"  budget {budget}, trajectory {length} tokens: {read} tokens read, "
                  f"{len(eps) / seconds:.2f} candidates/s", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="swe-mini")
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--near-misses", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--objective", choices=("pairwise", "pointwise"), default="pairwise")
    parser.add_argument("--work", type=Path, default=HERE / "runs" / "rerank-bench")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--baseline-commit", default="cfac927",
                        help="the featurizer to compare with (the last one before shared prefixes)")
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    ids, runs = graded_runs(args.suite, args.tasks, args.near_misses, args.work)
    graded_s = time.monotonic() - started
    result: dict[str, Any] = {"suite": args.suite}
    tables = {}
    if not args.skip_baseline:
        from orchard_cli.value import features

        speed, rows = reading_speed(runs, args.max_tokens, args.baseline_commit)
        result["reading"], result["max_rel_diff"] = speed, rows["max_rel_diff"]
        print("\n| featurizer | episodes | seconds | episodes/s | speedup |\n| --- | ---: | ---: | ---: | ---: |")
        for r in speed:
            print(f"| {r['featurizer']} | {r['episodes']} | {r['seconds']:.1f} | {r['per_second']:.3f} | x{r['speedup']:.2f} |")
        print(f"largest relative difference between the two featurizers' rows: {rows['max_rel_diff']:.1e}")
        for tag in ("before", "after"):  # the same heads and folds, each on one featurizer's rows
            features.clear_cache()
            features._CACHE.update(rows[tag])
            tables[tag] = best_of_n(cross_fit_scores(runs, args.work, args.max_tokens, args.folds, args.objective,
                                                     tag=f"-{tag}"), args.draws)
        # today's rows stay in the process's cache: the main table below reads them, not the LM
    by_task = cross_fit_scores(runs, args.work, args.max_tokens, args.folds, args.objective)
    table = best_of_n(by_task, args.draws)
    plot(table, args.work / "best_of_n.png")
    print(f"\n{args.suite}: {len(by_task)} held-out tasks ({args.folds}-fold cross-fitting, {args.objective} head), {len(runs)} candidates per "
          f"task, {args.draws} draws per N; grading + setup {graded_s:.0f} s\n")
    print("| N | tasks | " + " | ".join(SHOWN) + " |")
    print("| ---: | ---: | " + " | ".join("---:" for _ in SHOWN) + " |")
    for n in NS:
        row = table[n]
        if row.get("tasks"):
            print(f"| {n} | {row['tasks']} | " + " | ".join(f"{100 * row[s]:.1f}%" for s in SHOWN) + " |")
    print(f"\nplot: {args.work / 'best_of_n.png'}")
    for tag, other in tables.items():
        print(f"\nbest of N from the rows of the featurizer {tag} (value column; the others do not read rows):")
        print("| N | value " + tag + " |\n| ---: | ---: |")
        for n in NS:
            if other[n].get("tasks"):
                print(f"| {n} | {100 * other[n]['value']:.1f}% |")
    result.update(tasks=len(by_task), best_of_n=table, best_of_n_by_featurizer=tables)
    if not args.skip_throughput:
        rows = throughput(args.work / f"model-{args.objective}-1of{args.folds}", runs)
        result["throughput"] = rows
        print("\n| budget | trajectory tokens | tokens read | candidates/s |\n| ---: | ---: | ---: | ---: |")
        for r in rows:
            print(f"| {r['budget']} | {r['trajectory_tokens']} | {r['tokens_read']} | {r['candidates_per_second']:.2f} |")
    (args.work / "result.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
