"""orchard train and orchard rl past one process: DDP against FSDP2, and the RL step with --sync lora.

    .venv/bin/python bench/scale_bench.py [--model smollm2] [--steps 6] [--procs 2] [--skip-rl]
    python bench/scale_bench.py --random-model 2048,8192,24,32 --tokenizer DIR --skip-rl   # a GPU

Where torch sees CUDA devices, the processes run on GPUs (NCCL; `--procs` default: every GPU), in
bf16; otherwise on the CPU (gloo, 1 torch thread per process, fp32). `--model` is `smollm2` or a
checkpoint folder (on a GPU machine: the largest student it holds); `--random-model
HIDDEN,FFN,LAYERS,HEADS` makes a Llama of that shape with random weights and `--tokenizer`'s
vocabulary (for machines that reach no model hub: throughput and memory do not depend on the
weights). With one GPU there is no second process: the runs are 1 process, with
`--grad-checkpointing`, and with `--lora`.

1. train: the same trajectories and settings (synthetic bash-agent episodes, per-call samples,
   `--max-seq-len 512`, batch 2 x grad-accum 2, `--steps` steps) in 1 process, and in N processes
   with `--shard none` (DDP) and `--shard full` (FSDP2), each a real `torchrun --standalone
   --nproc-per-node N -m orchard_cli.main train` (1 process: `orchard train`). Per run: the median
   step's tokens/s (the whole step, every process), peak memory per process (CPU: rank 0's max
   RSS, the model's load included; CUDA: max allocated), parameters + optimizer state per process,
   and the largest relative difference of its per-step losses from the 1-process run's.
2. rl: `orchard rl capitals --harness chat --base-url URL --sync lora` against `orchard serve --enable-lora` in
   its own process, then the same run with the policy served in-process (full fine-tune, the
   weights copied in place): median rollout / update / sync seconds per step, the largest
   `logprob_gap`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable


def orchard(*args: str, procs: int = 1, env: dict | None = None) -> dict:
    launcher = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs)] if procs > 1 \
        else [PY]
    cmd = [*launcher, "-m", "orchard_cli.main", *args, "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def cuda_devices() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def write_data(folder: Path, episodes: int) -> Path:
    from orchard_cli.records import JsonlWriter
    from orchard_cli.training.synthetic import synthetic_trajectory

    path = folder / "traj.jsonl"
    with JsonlWriter(path) as writer:
        for seed in range(1, episodes + 1):
            writer.write(synthetic_trajectory(seed, calls=2))
    return path


def random_model(shape: str, tokenizer_dir: str, folder: Path) -> str:
    """A Llama of HIDDEN,FFN,LAYERS,HEADS with random bf16 weights and the tokenizer's vocabulary."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    hidden, ffn, layers, heads = (int(x) for x in shape.split(","))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=4096,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    print(f"random Llama {shape}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters", flush=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return str(folder)


def part_train(args: argparse.Namespace, work: Path, gpus: int) -> None:
    data = write_data(work, 16)
    procs = args.procs or max(2, gpus)
    precision = "bf16" if gpus else "fp32"
    common = ["train", "-t", str(data), "--model", args.model, "--max-steps", str(args.steps),
              "--max-seq-len", "512", "--batch-size", "2", "--grad-accum", "2", "--precision", precision,
              "--lr", "1e-5", "--save-every", "1000"]
    if not gpus:
        common += ["--threads", "1"]
    plans = [("1 process", 1, ["--shard", "auto"]), (f"{procs} x DDP", procs, ["--shard", "none"]),
             (f"{procs} x FSDP2", procs, ["--shard", "full"])]
    if gpus == 1:  # one GPU: no second process
        plans = [("1 process", 1, []), ("1 + grad ckpt", 1, ["--grad-checkpointing"]), ("1 + LoRA", 1, ["--lora"])]
    runs = {}
    for name, n, extra in plans:
        out = work / name.replace(" ", "").replace("+", "")
        started = time.monotonic()
        summary = orchard(*common, "--out", str(out), *extra, procs=n)
        losses = [json.loads(line)["loss"] for line in (out / "training_log.jsonl").read_text().splitlines()]
        runs[name] = (summary, losses, time.monotonic() - started)
        shutil.rmtree(out, ignore_errors=True)
    ref = runs["1 process"][1]
    where = f"{gpus} GPU(s), {precision}" if gpus else f"CPU, gloo, 1 thread per process, {precision}"
    print(f"\n1. orchard train, {args.model}, {args.steps} steps of 4 rows (max 512 tokens), {where}")
    print(f"   {'run':<12} {'shard':>6} {'tok/s':>8} {'peak MiB/proc':>14} {'params+optim MiB/proc':>22} "
          f"{'max rel. loss diff':>19} {'wall s':>7}")
    for name, (s, losses, wall) in runs.items():
        diff = "-" if "LoRA" in name else f"{max(abs(a - b) / abs(b) for a, b in zip(losses, ref)):.2e}"
        print(f"   {name:<12} {s['shard']:>6} {s['tokens_per_s'] or 0:>8.1f} {s['peak_memory_mib']:>14.0f} "
              f"{s['state_mib']:>22.1f} {diff:>19} {wall:>7.0f}")
    one = runs["1 process"][0]["state_mib"]
    if f"{procs} x FSDP2" in runs:
        print(f"   FSDP2 params+optim per process / 1 process: {runs[f'{procs} x FSDP2'][0]['state_mib'] / one:.3f}; "
              f"DDP: {runs[f'{procs} x DDP'][0]['state_mib'] / one:.3f}")


def serve(home_env: dict, log: Path) -> tuple[subprocess.Popen, str]:
    with log.open("w") as err:
        proc = subprocess.Popen([PY, "-m", "orchard_cli.main", "serve", "--model", "smollm2", "--port", "0",
                                 "--enable-lora", "--format", "json"], stdout=subprocess.PIPE, stderr=err, text=True,
                                env=home_env)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        raise SystemExit(f"orchard serve did not start:\n{log.read_text()[-3000:]}")
    return proc, json.loads(line)["base_url"]


def part_rl(args: argparse.Namespace, work: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc, url = serve(env, work / "serve.log")
    common = ["rl", "capitals", "--harness", "chat", "--steps", str(args.rl_steps), "--tasks-per-step", "4", "-G", "4",
              "--max-new-tokens", "8", "--lr", "1e-4", "--save-every", "1000"]
    rows = {}
    try:
        rows["--sync lora (orchard serve, own process)"] = orchard(
            *common, "--base-url", url, "--sync", "lora", "--out", str(work / "rl-lora"), env=env)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    rows["in-process (full weights copied)"] = orchard(*common, "--out", str(work / "rl-inproc"), env=env)
    print(f"\n2. orchard rl capitals, smollm2, {args.rl_steps} steps x 4 tasks x G=4, 8 new tokens (CPU); medians per step")
    print(f"   {'policy':<42} {'rollout s':>9} {'update s':>9} {'sync s':>8} {'max logprob gap':>16}")
    for name, summary in rows.items():
        steps = [json.loads(line) for line in (Path(summary["out"]) / "steps.jsonl").read_text().splitlines()]
        med = {k: statistics.median(s[k] for s in steps) for k in ("rollout_seconds", "update_seconds", "sync_seconds")}
        gaps = [s["logprob_gap"] for s in steps if s["logprob_gap"] is not None]
        print(f"   {name:<42} {med['rollout_seconds']:>9.2f} {med['update_seconds']:>9.2f} {med['sync_seconds']:>8.3f} "
              f"{max(gaps) if gaps else float('nan'):>16.1e}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--procs", type=int, default=0)
    parser.add_argument("--rl-steps", type=int, default=4)
    parser.add_argument("--skip-rl", action="store_true")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--random-model", default=None, help="HIDDEN,FFN,LAYERS,HEADS")
    parser.add_argument("--tokenizer", default=None, help="a folder with the tokenizer (--random-model)")
    args = parser.parse_args()
    gpus = cuda_devices()
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        work = Path(tmp)
        if args.random_model:
            args.model = random_model(args.random_model, args.tokenizer, work / "random-model")
        if not args.skip_train:
            part_train(args, work, gpus)
        if not args.skip_rl:
            part_rl(args, work)
    if not gpus:
        print("\n(no CUDA device: CPU figures; on a GPU machine the same script measures DDP vs FSDP2 on GPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
