"""Continuous batching in `orchard serve`: batched against one request at a time, in one run.

Two servers of the same model, started by this script, side by side:
  batched    the local server with `--max-batch B` (continuous batching, default 16)
  unbatched  the same server with `--max-batch 1`: one generation at a time under the model's lock
             (the code path before batching: the issue's baseline)
and optionally a third, `--compare-url` (an OpenAI-compatible server already running, such as
llama.cpp's `llama-server --parallel 8` or vLLM), named `compare`.

At each concurrency level c (default 1, 2, 4, 8, 16), c clients each send one streamed, greedy
chat completion at the same moment; a round ends when all are answered. Rounds alternate the order
of the servers, so machine noise hits them alike. Per level and server the table gives medians
over the rounds of the aggregate tokens/s (all completion tokens / the round's wall time) and, over
every request, the median time to the first content chunk (TTFT) and per-request tokens/s; then
batched / unbatched ratios and TTFT at c / TTFT at 1. Greedy decoding should give the same tokens
batched and not: the table says how many requests did (on a GPU, batched fp32 arithmetic may flip
a near-tie). Both servers run with `--no-prefix-cache` so every round does the same work.

    # CPU, small numbers (~3 minutes on 2 cores):
    .venv/bin/python bench/serve_batch_bench.py --levels 1,4,8 --rounds 2 --max-tokens 24
    # GPU: weights that cannot travel are replaced by seeded random ones of the same shape
    # (--random-weights; a folder with the model's config and tokenizer, from --export-skeleton):
    .venv/bin/python bench/serve_batch_bench.py --export-skeleton bench-skeleton     # here, once
    python3 bench/serve_batch_bench.py --device cuda --model bench-skeleton --random-weights \
        --levels 1,2,4,8,16,32,64 --max-batch 64 --max-tokens 64 --rounds 3 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about apples.",
    "Explain what a unit test is in two sentences.",
    "List three colors.",
    "How do I list the files in a directory with bash?",
    "Write a short story about a dragon who learns to bake.",
    "What does HTTP status 429 mean?",
    "Give me three tips for writing clear code.",
]


# -- the servers (each in a process of its own) ----------------------------------------------------
def child(args: argparse.Namespace) -> None:
    """Serve one model on loopback; print the base URL; stop when stdin closes."""
    sys.path.insert(0, str(ROOT))
    from orchard_cli.models.local_server import LocalEndpoint

    model = random_model(args.model, args.device, args.threads) if args.random_weights else None
    endpoint = LocalEndpoint(args.model, threads=args.threads, prefix_cache=False, max_batch=args.max_batch,
                             model=model, device=args.device)
    info = endpoint.start()
    print(json.dumps({"base_url": info.base_url, "batching": endpoint.batching}), flush=True)
    sys.stdin.read()
    endpoint.stop()


def random_model(folder: str, device: str, threads: int) -> Any:
    """The model of `folder`'s config and tokenizer with seeded random weights (no weights read)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from orchard_cli.models.local_model import LocalModel

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(folder)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval().to(device)
    return LocalModel(Path(folder).name, Path(folder), AutoTokenizer.from_pretrained(folder), model)


def export_skeleton(model: str, target: str) -> None:
    sys.path.insert(0, str(ROOT))
    from orchard_cli.models.local_model import load_model

    loaded = load_model(model)
    loaded.model.config.save_pretrained(target)
    loaded.tokenizer.save_pretrained(target)
    print(f"# wrote {model}'s config and tokenizer (no weights) to {target}", file=sys.stderr)


def start(args: argparse.Namespace, max_batch: int) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, __file__, "--child", "--model", args.model, "--device", args.device,
           "--threads", str(args.threads), "--max-batch", str(max_batch)]
    if args.random_weights:
        cmd.append("--random-weights")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1",
                                 "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        sys.exit(f"the server with --max-batch {max_batch} did not start (its stderr is above)")
    said = json.loads(line)
    print(f"# --max-batch {max_batch}: {said['batching']}", file=sys.stderr)
    return proc, said["base_url"]


# -- the clients ---------------------------------------------------------------------------------
async def one(client: Any, url: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = {"model": "bench", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "return_token_ids": True}
    started, first, ids = time.perf_counter(), None, []
    async with client.stream("POST", f"{url}/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            raise SystemExit(f"{url}: HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            choice = (json.loads(line[6:]).get("choices") or [{}])[0]
            delta = choice.get("delta") or {}
            if first is None and (delta.get("content") or delta.get("tool_calls")):
                first = time.perf_counter() - started
            ids += choice.get("token_ids") or delta.get("token_ids") or []
    elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "ttft_s": first if first is not None else elapsed, "ids": ids,
            "tokens": len(ids), "tok_s": len(ids) / elapsed if elapsed else 0.0}


async def round_of(url: str, c: int, max_tokens: int, offset: int) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=c + 4, max_keepalive_connections=c + 4)
    async with httpx.AsyncClient(timeout=1800, limits=limits) as client:
        started = time.perf_counter()
        runs = await asyncio.gather(*(one(client, url, PROMPTS[(offset + i) % len(PROMPTS)], max_tokens)
                                      for i in range(c)))
        wall = time.perf_counter() - started
    return {"wall_s": wall, "tokens": sum(r["tokens"] for r in runs), "runs": runs,
            "aggregate_tok_s": sum(r["tokens"] for r in runs) / wall}


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [r for rd in rounds for r in rd["runs"]]
    return {"aggregate_tok_s": statistics.median(rd["aggregate_tok_s"] for rd in rounds),
            "ttft_s": statistics.median(r["ttft_s"] for r in runs),
            "request_tok_s": statistics.median(r["tok_s"] for r in runs),
            "tokens": sum(r["tokens"] for r in runs), "requests": len(runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2", help="smollm2, or a checkpoint folder")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    parser.add_argument("--levels", default="1,2,4,8,16", help="concurrent requests, comma-separated")
    parser.add_argument("--max-batch", type=int, default=16, help="the batched server's --max-batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of each server")
    parser.add_argument("--random-weights", action="store_true",
                        help="--model is a folder with a config and tokenizer; weights are seeded random")
    parser.add_argument("--compare-url", default=None, help="another OpenAI-compatible server (.../v1)")
    parser.add_argument("--export-skeleton", metavar="DIR", default=None,
                        help="write --model's config and tokenizer (no weights) to DIR, then exit")
    parser.add_argument("--json", dest="json_out", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.export_skeleton:
        return export_skeleton(args.model, args.export_skeleton)
    try:
        levels = [int(x) for x in args.levels.split(",")]
        assert levels and min(levels) >= 1 and args.rounds >= 1 and args.max_tokens >= 1
    except (ValueError, AssertionError):
        print(f"error: --levels wants positive integers (got {args.levels!r}); --rounds, --max-tokens >= 1",
              file=sys.stderr)
        sys.exit(2)

    servers: dict[str, tuple[Any, str]] = {}
    print(f"# starting two servers of {args.model} on {args.device}...", file=sys.stderr)
    try:
        servers["batched"] = start(args, args.max_batch)
        servers["unbatched"] = start(args, 1)
        if args.compare_url:
            servers["compare"] = (None, args.compare_url.rstrip("/"))
        for name, (_, url) in servers.items():  # warm up (first forward passes, allocator)
            asyncio.run(round_of(url, 2, 4, 0))
        results: dict[str, dict[int, list[dict[str, Any]]]] = {name: {c: [] for c in levels} for name in servers}
        for round_ in range(args.rounds):
            for c in levels:
                names = list(servers)
                names = names[round_ % len(names):] + names[:round_ % len(names)]
                for name in names:
                    results[name][c].append(asyncio.run(round_of(servers[name][1], c, args.max_tokens, round_)))
            print(f"# round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for proc, _ in servers.values():
            if proc is not None:
                proc.stdin.close()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    report(args, levels, results)


def report(args: argparse.Namespace, levels: list[int], results: dict[str, Any]) -> None:
    same = total = 0
    for c in levels:
        for a, b in zip(results["batched"][c], results["unbatched"][c]):
            for x, y in zip(a["runs"], b["runs"]):
                total, same = total + 1, same + (x["ids"] == y["ids"])
    table = {name: {c: summary(rounds) for c, rounds in by_level.items()} for name, by_level in results.items()}
    base = table["batched"][levels[0]]["ttft_s"]
    print(f"\nmodel {args.model}{' (random weights)' if args.random_weights else ''} on {args.device}, "
          f"{args.threads} CPU thread(s) a server, batched --max-batch {args.max_batch}, greedy, max_tokens "
          f"{args.max_tokens}, {args.rounds} rounds; medians")
    print(f"same tokens batched and unbatched: {same}/{total} requests; load average at the end "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    head = f"{'conc':>5}{'server':>11}{'agg tok/s':>11}{'vs unbatched':>14}{'TTFT s':>9}{'TTFT/lone':>11}{'req tok/s':>11}"
    print(head)
    rows = []
    for c in levels:
        for name in table:
            row = table[name][c]
            ratio = row["aggregate_tok_s"] / max(table["unbatched"][c]["aggregate_tok_s"], 1e-9)
            lone = row["ttft_s"] / max(base, 1e-9) if name == "batched" else None
            rows.append({"concurrency": c, "server": name, **row, "vs_unbatched": ratio, "ttft_vs_lone": lone})
            print(f"{c:>5}{name:>11}{row['aggregate_tok_s']:>11.1f}{ratio:>13.2f}x{row['ttft_s']:>9.3f}"
                  f"{(f'{lone:.2f}x' if lone is not None else '-'):>11}{row['request_tok_s']:>11.1f}")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"args": vars(args), "same_tokens": [same, total], "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
