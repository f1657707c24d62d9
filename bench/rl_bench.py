"""`orchard rollout` and `orchard rl` on the embedded SmolLM2: what RL costs here and whether it learns.

    .venv/bin/python bench/rl_bench.py [--steps 20] [--skip-rl] [--only-throughput] [--out /tmp/rl-bench]

In one run, on the `capitals` quiz family (one call, replies cut at 8 tokens, temperature 1):
1. The pass rate that chose the family: `orchard rollout capitals` over its 48 tasks x G=4.
2. Rollout throughput with 1, 2 and 4 workers (episodes and policy tokens per second), on 8 tasks x G=4.
3. The learner against `orchard train`'s step on the same tokens: the samples of those rollouts
   (prompt + answer, the loss on the answer), one optimizer step each way, `--repeats` times
   alternating; medians of tokens per second and the ratio. And the weight sync (learner ->
   served copy) time, median of 10.
4. `orchard rl` for `--steps` steps (4 tasks x G=4 each, lr 2e-5) against a control run from the
   same checkpoint with rewards shuffled across each step's episodes (`--shuffle-rewards`), both
   evaluated on `capitals-heldout` (16 tasks never trained on, 4 sampled attempts each) at step 0
   and every `--eval-every` steps: the held-out mean reward of both, side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ORCHARD = str(Path(sys.executable).with_name("orchard"))


def orchard(*args: str) -> dict:
    done = subprocess.run([ORCHARD, *args, "--format", "json"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"orchard {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def pass_rate(out: Path) -> dict:
    summary = orchard("rollout", "capitals", "--harness", "chat", "-G", "4", "--max-new-tokens", "8", "--out", str(out / "all.jsonl"))
    print(f"1. pass rate of smollm2 on capitals (48 tasks x G=4, T=1, 8 tokens): mean reward "
          f"{summary['mean_reward']:.3f}; groups with signal {summary['groups_with_signal']}/48")
    return summary


def throughput(out: Path) -> Path:
    rows = []
    for workers in (1, 2, 4):
        s = orchard("rollout", "capitals", "--harness", "chat", "--limit", "8", "-G", "4", "--max-new-tokens", "8", "--workers",
                    str(workers), "--out", str(out / f"w{workers}.jsonl"))
        rows.append((workers, s["episodes_per_s"], s["policy_tokens_per_s"], s["wall_seconds"]))
    print("\n2. rollout throughput (8 tasks x G=4)")
    print(f"   {'workers':>7} {'episodes/s':>11} {'policy tok/s':>13} {'wall s':>8}")
    for w, eps, tps, wall in rows:
        print(f"   {w:>7} {eps:>11.2f} {tps:>13.1f} {wall:>8.1f}")
    for w, eps, _, _ in rows[1:]:  # the served model batches the workers' concurrent calls
        print(f"   {w} workers / 1 worker: x{eps / rows[0][1]:.2f}")
    return out / "w1.jsonl"


def learner_vs_train(rollouts: Path, repeats: int) -> None:
    import torch

    from orchard_cli.models.local_model import LocalModel, load_weights
    from orchard_cli.rl.learner import Learner, LearnerConfig, items_of
    from orchard_cli.rl.rollouts import read_rollouts
    from orchard_cli.training.batches import plan
    from orchard_cli.training.config import TrainConfig
    from orchard_cli.training.trainer import Trainer

    found = read_rollouts(rollouts)
    for i, r in enumerate(found):  # every sequence trained on, as an SFT step would
        r.advantage = 1.0 if i % 2 else -1.0
    items = items_of(found, 2048)[0]
    samples = [it.sample for it in items]
    model, tokenizer, source = load_weights("smollm2")
    learner = Learner(model, LearnerConfig(lr=1e-7), pad_id=tokenizer.pad_token_id or 0)
    sft_model = load_weights("smollm2")[0]
    config = TrainConfig(trajectories=[], base_model="smollm2", out="/tmp/unused", lr=1e-7, max_steps=repeats + 1,
                         batch_size=len(samples), precision="fp32", threads=torch.get_num_threads())
    steps = plan(samples, epochs=1, max_steps=repeats + 1, seed=0, max_len=2048, packing=True,
                 batch_size=len(samples), grad_accum=1)
    trainer = Trainer(sft_model, config, steps, Path("/tmp/unused"), tokenizer.pad_token_id or 0)
    ours, theirs = [], []
    learner.update(found)
    trainer.run_step(0)  # warm-up, both
    for k in range(repeats):
        s = learner.update(found)
        ours.append(s.tokens / s.seconds)
        log = trainer.run_step(min(k + 1, len(steps) - 1))
        theirs.append(log.tokens / log.seconds)
    served = LocalModel("smollm2", Path(source), tokenizer, load_weights("smollm2")[0].eval())
    syncs = [served.load_weights_from(model) for _ in range(10)]
    o, t = statistics.median(ours), statistics.median(theirs)
    print(f"\n3. learner vs orchard train on the same {sum(len(s.input_ids) for s in samples)} tokens "
          f"({len(samples)} sequences, one packed step, fp32, {torch.get_num_threads()} thread(s), {repeats} repeats)")
    print(f"   {'':<16} {'median tok/s':>13}")
    print(f"   {'orchard rl':<16} {o:>13.1f}\n   {'orchard train':<16} {t:>13.1f}\n   ratio rl/train: {o / t:.3f}")
    print(f"   weight sync (learner -> served copy, 135M parameters): median {statistics.median(syncs) * 1000:.1f} ms")


def rl_vs_control(out: Path, steps: int, every: int) -> None:
    runs = {}
    for name, extra in (("rl", []), ("control", ["--shuffle-rewards"])):
        started = time.monotonic()
        runs[name] = orchard("rl", "capitals", "--harness", "chat", "--steps", str(steps), "--tasks-per-step", "4", "-G", "4",
                             "--max-new-tokens", "8", "--lr", "2e-5", "--eval-suite", "capitals-heldout",
                             "--eval-every", str(every), "--eval-attempts", "4", "--out", str(out / name), *extra)
        runs[name]["wall"] = time.monotonic() - started
    print(f"\n4. orchard rl vs a shuffled-reward control ({steps} steps x 4 tasks x G=4, lr 2e-5); held-out mean reward")
    print(f"   {'step':>5} {'rl':>8} {'control':>8}")
    control = {e["step"]: e["mean_reward"] for e in runs["control"]["evals"]}
    for e in runs["rl"]["evals"]:
        print(f"   {e['step']:>5} {e['mean_reward']:>8.3f} {control.get(e['step'], float('nan')):>8.3f}")
    for name, s in runs.items():
        print(f"   {name}: training mean reward step 1 {s['first_mean_reward']} -> last {s['last_mean_reward']}; "
              f"wall {s['wall']:.0f} s; curve {s['reward_curve']}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/rl-bench")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-rl", action="store_true")
    parser.add_argument("--only-throughput", action="store_true", help="part 2 alone")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.jsonl"):
        old.unlink()
    if args.only_throughput:
        throughput(out)
        return 0
    pass_rate(out)
    learner_vs_train(throughput(out), args.repeats)
    if not args.skip_rl:
        import shutil

        for name in ("rl", "control"):
            shutil.rmtree(out / name, ignore_errors=True)
        rl_vs_control(out, args.steps, args.eval_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
