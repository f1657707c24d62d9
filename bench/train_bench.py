"""orchard train's loop vs TRL's SFTTrainer: same data, same model, same settings, same machine.

    .venv/bin/python bench/train_bench.py [--steps 8] [--threads 2] [--precision auto] [--rounds 1]

What it does, in one run:
1. SmolLM2-135M-Instruct (`smollm2`, converted once and cached under ORCHARD_HOME like `orchard
   train` does), synthetic bash-agent trajectories (`orchard_cli.training.synthetic`), and
   orchard's per-call builder: `--steps` samples (input ids + labels, loss on assistant tokens
   only) written to one JSONL file that both sides read.
2. TRL in a separate virtual environment, ORCHARD_HOME/cache/bench/trl-venv, created on first use
   with `pip install trl==1.16.0` next to the *same* torch, transformers and accelerate versions as
   the project's .venv (so the project's pins are untouched and both sides run the same libraries).
3. Each side in its own process (so peak RSS is its own), alternating `--rounds` times: one pass
   over the samples in file order (TRL: train_sampling_strategy="sequential"), batch 1, no
   gradient accumulation, no packing, max length `--max-seq-len`, AdamW lr 2e-5 cosine without
   warm-up, grad clip 1.0, the same precision (`auto` = orchard's default: bf16 autocast on a CPU
   with AVX512-BF16/AMX, else fp32; TRL gets `bf16=` accordingly), gradient checkpointing OFF on
   both (TRL turns it on by default), the same number of torch threads. TRL gets the pre-tokenized
   `input_ids` + `labels`, so both sides compute the loss on exactly the same tokens; the per-step
   losses are printed side by side as the check that they did the same work.
4. Step time = the interval between two step-end callbacks (data, forward, backward, optimizer and
   each side's own logging); the first step of each run is warm-up and left out of the medians.
5. How much the merged builder saves: tokens processed per epoch, per call vs merged, on the same
   episodes (the trained tokens are the same).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

TRL_VERSION = "1.16.0"
SHARED = ("torch", "transformers", "accelerate")
LR = 2e-5


# ---- workers (each runs in its own process) -----------------------------------------------------

def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_orchard(spec: dict) -> dict:
    import torch

    from orchard_cli.training.batches import Row, Step
    from orchard_cli.training.config import TrainConfig
    from orchard_cli.training.model_loading import load_base_model
    from orchard_cli.training.samples import Sample
    from orchard_cli.training.trainer import Trainer

    torch.set_num_threads(spec["threads"])
    t0 = time.perf_counter()
    base = load_base_model(spec["model"])
    load_s = time.perf_counter() - t0
    rows = [json.loads(line) for line in Path(spec["samples"]).read_text().splitlines()]
    steps = [Step([[Row([Sample(r["input_ids"], r["labels"], "bench")])]], 0) for r in rows]
    config = TrainConfig(trajectories=[], base_model=spec["model"], out=spec["out"], lr=LR, warmup_ratio=0.0,
                         max_seq_len=spec["max_seq_len"], precision=spec["precision"], threads=spec["threads"],
                         save_every=10**9)
    ends: list[float] = []
    tokens: list[int] = []
    losses: list[float] = []

    def on_step(log) -> None:  # type: ignore[no-untyped-def]
        ends.append(time.perf_counter())
        tokens.append(log.tokens)
        losses.append(log.loss)

    trainer = Trainer(base.model, config, steps, Path(spec["out"]), pad_id=base.tokenizer.pad_token_id,
                      on_step=on_step)
    begin = time.perf_counter()
    trainer.train()
    times = [b - a for a, b in zip([begin] + ends[:-1], ends)]
    return {"side": "orchard", "load_s": load_s, "times": times, "tokens": tokens, "losses": losses,
            "precision": trainer.precision, "threads": torch.get_num_threads(), "peak_rss_mib": _peak_rss_mib()}


def worker_trl(spec: dict) -> dict:
    import datasets
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    torch.set_num_threads(spec["threads"])
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    load_s = time.perf_counter() - t0
    rows = [json.loads(line) for line in Path(spec["samples"]).read_text().splitlines()]
    data = datasets.Dataset.from_list([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows])
    ends: list[float] = []
    losses: list[float] = []
    counted: list[int] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            ends.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            ends.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):  # type: ignore[no-untyped-def]
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    config = trl.SFTConfig(
        output_dir=spec["out"], per_device_train_batch_size=1, gradient_accumulation_steps=1, num_train_epochs=1,
        learning_rate=LR, lr_scheduler_type="cosine", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        optim="adamw_torch", max_length=spec["max_seq_len"], packing=False, gradient_checkpointing=False,
        bf16=spec["precision"] == "bf16", use_cpu=True, logging_steps=1, save_strategy="no", report_to=[],
        seed=0, dataloader_num_workers=0, train_sampling_strategy="sequential", disable_tqdm=True)
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer,
                             callbacks=[Clock()])
    inner = trainer.data_collator

    def collate(features):  # type: ignore[no-untyped-def]
        batch = inner(features)
        mask = batch.get("attention_mask")
        counted.append(int(mask.sum()) if mask is not None else int(batch["input_ids"].numel()))
        return batch

    trainer.data_collator = collate
    trainer.train()
    times = [b - a for a, b in zip(ends[:-1], ends[1:])]
    return {"side": "trl", "load_s": load_s, "times": times, "tokens": counted[:len(times)], "losses": losses,
            "precision": spec["precision"], "threads": torch.get_num_threads(), "peak_rss_mib": _peak_rss_mib(),
            "gradient_checkpointing": bool(getattr(model, "is_gradient_checkpointing", False))}


# ---- the driver ---------------------------------------------------------------------------------

def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in SHARED}


def trl_python(home: Path) -> Path:
    """The bench venv's python: TRL next to the project's own torch/transformers/accelerate versions."""
    venv = home / "cache" / "bench" / "trl-venv"
    python = venv / "bin" / "python"
    pins = [f"{n}=={v}" for n, v in _versions().items()] + [f"trl=={TRL_VERSION}"]
    marker = venv / "orchard-pins.txt"
    if python.exists() and marker.is_file() and marker.read_text().split() == pins:
        return python
    print(f"[bench] creating {venv} with {' '.join(pins)} (once)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    torch_pin = [p for p in pins if p.startswith("torch==")]
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *torch_pin],
                   check=True)  # torch first and exactly (an unpinned one would pull a CUDA build)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins], check=True)
    marker.write_text("\n".join(pins) + "\n")
    return python


def _model_folder() -> Path:
    """The converted SmolLM2 checkpoint (made by the same loader `orchard train` uses)."""
    code = ("from orchard_cli.training.model_loading import _smollm2_cache, load_base_model\n"
            "c = _smollm2_cache()\n"
            "if not (c / 'model.safetensors').is_file(): load_base_model('smollm2')\n"
            "print(c)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def _data(folder: Path, args: argparse.Namespace, work: Path) -> tuple[Path, dict, dict]:
    import random

    from transformers import AutoTokenizer

    from orchard_cli.training.turns import episode_of
    from orchard_cli.training.samples import build_samples
    from orchard_cli.training.synthetic import synthetic_trajectories

    tokenizer = AutoTokenizer.from_pretrained(folder)
    episodes = [episode_of(t) for t in synthetic_trajectories(args.episodes, calls=args.calls, seed=7)]
    per_call, a = build_samples(episodes, tokenizer, builder="per-call", max_seq_len=args.max_seq_len)
    _, b = build_samples(episodes, tokenizer, builder="merged", max_seq_len=args.max_seq_len)
    chosen = list(per_call)
    random.Random(0).shuffle(chosen)
    chosen = chosen[:args.steps]
    path = work / "samples.jsonl"
    path.write_text("".join(json.dumps({"input_ids": s.input_ids, "labels": s.labels}) + "\n" for s in chosen))
    return path, a.model_dump(), b.model_dump()


def _run(python: Path, side: str, spec: dict, work: Path) -> dict:
    spec_path = work / f"spec-{side}.json"
    result_path = work / f"result-{side}-{time.time_ns()}.json"
    spec_path.write_text(json.dumps({**spec, "out": str(work / f"out-{side}"), "result": str(result_path)}))
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([str(python), __file__, "--worker", side, "--spec", str(spec_path)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"[bench] the {side} worker failed:\n{proc.stderr[-4000:]}")
    return json.loads(result_path.read_text())


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _summary(results: list[dict]) -> dict:
    times = [t for r in results for t in r["times"][1:]]  # the first step of each run is warm-up
    rates = [n / t for r in results for n, t in zip(r["tokens"][1:], r["times"][1:]) if t > 0]
    return {"step_s": _median(times), "tok_s": _median(rates), "rss": max(r["peak_rss_mib"] for r in results),
            "load_s": _median([r["load_s"] for r in results]), "steps": len(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="samples = optimizer steps per run")
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--calls", type=int, default=4, help="model calls per synthetic episode")
    parser.add_argument("--max-seq-len", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on both sides (1: see trainer.default_threads)")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    parser.add_argument("--rounds", type=int, default=1, help="alternate orchard/TRL runs this many times")
    parser.add_argument("--worker", choices=("orchard", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(Path(args.spec).read_text())
        result = (worker_orchard if args.worker == "orchard" else worker_trl)(spec)
        Path(spec["result"]).write_text(json.dumps(result))
        return

    from orchard_cli.home import orchard_home
    from orchard_cli.training.trainer import resolve_precision

    started = time.monotonic()
    home = orchard_home()
    work = home / "cache" / "bench" / f"train-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True)
    precision = resolve_precision(args.precision, "cpu")
    folder = _model_folder()
    samples, per_call, merged = _data(folder, args, work)
    trl_py = trl_python(home)
    spec = {"model": str(folder), "samples": str(samples), "max_seq_len": args.max_seq_len,
            "threads": args.threads, "precision": precision}
    runs: dict[str, list[dict]] = {"orchard": [], "trl": []}
    for round_ in range(args.rounds):
        for side, python in (("orchard", Path(sys.executable)), ("trl", trl_py)):
            print(f"[bench] round {round_ + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
            runs[side].append(_run(python, side, spec, work))
    o, t = _summary(runs["orchard"]), _summary(runs["trl"])
    tokens = sum(runs["orchard"][0]["tokens"])
    print(f"\norchard train loop vs TRL {TRL_VERSION} SFTTrainer: SmolLM2-135M, {args.steps} samples "
          f"({tokens} tokens) x {args.rounds} round(s), batch 1, max length {args.max_seq_len}, {precision}, "
          f"{args.threads} thread(s), gradient checkpointing off on both, {_versions()}")
    print(f"\n| | orchard loop | TRL SFTTrainer | orchard / TRL |\n| --- | ---: | ---: | ---: |")
    print(f"| median tokens/s | {o['tok_s']:.1f} | {t['tok_s']:.1f} | {o['tok_s'] / t['tok_s']:.2f} |")
    print(f"| median step time (s) | {o['step_s']:.2f} | {t['step_s']:.2f} | {o['step_s'] / t['step_s']:.2f} |")
    print(f"| peak RSS (MiB) | {o['rss']:.0f} | {t['rss']:.0f} | {o['rss'] / t['rss']:.2f} |")
    print(f"| model load (s) | {o['load_s']:.1f} | {t['load_s']:.1f} | |")
    print(f"| steps in the medians | {o['steps']} | {t['steps']} | |")
    lo, lt = runs["orchard"][0]["losses"], runs["trl"][0]["losses"]
    print("\nper-step loss (first round), orchard | TRL: " + ", ".join(f"{a:.4f}|{b:.4f}" for a, b in zip(lo, lt)))
    gc = [r.get("gradient_checkpointing") for r in runs["trl"]]
    print(f"TRL gradient checkpointing on the model: {gc}")
    print(f"\n| builder (same {args.episodes} episodes x {args.calls} calls) | samples | tokens per epoch | "
          f"trained tokens | masked share |\n| --- | ---: | ---: | ---: | ---: |")
    for name, s in (("per-call", per_call), ("merged", merged)):
        print(f"| {name} | {s['samples']} | {s['tokens']} | {s['trainable_tokens']} | {s['masked_share']:.3f} |")
    saving = 1 - merged["tokens"] / per_call["tokens"]
    print(f"\nmerged processes {saving:.0%} fewer tokens ({per_call['tokens'] / merged['tokens']:.2f}x less) for the "
          f"same {merged['trainable_tokens']} trained tokens (merge breaks: {merged['merge_breaks']}); at the "
          f"orchard loop's {o['tok_s']:.0f} tok/s an epoch takes ~{per_call['tokens'] / o['tok_s']:.0f} s per call "
          f"vs ~{merged['tokens'] / o['tok_s']:.0f} s merged")
    print(f"\nbench wall time: {time.monotonic() - started:.0f} s; files in {work}")


if __name__ == "__main__":
    main()
