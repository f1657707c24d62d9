"""`orchard serve` benchmark: tokens per second through the server against plain `generate`.

The same prompts, greedy, the same max_tokens, the same torch thread count, three ways:
  generate   transformers' `model.generate` in a loop, in this process (no server, no HTTP)
  serve      `orchard serve --no-prefix-cache` in its own process (so it does the same work as
             `generate`: no prompt tokens skipped), non-streamed /v1/chat/completions
  stream     the same server, streamed (also: time to the first content chunk)

Rounds interleave the three modes prompt by prompt, so machine noise hits them alike. Tokens per
second of one request = completion tokens / wall time of that request (prompt processing
included, as a client sees it). On a busy machine wall time mostly measures the other processes,
so the table also gives tokens per CPU-second: of this thread for `generate`, of the whole
server process (event loop, HTTP, JSON and the model) for `serve` and `stream`. Greedy decoding must give the same tokens every way: the table
says whether it did. Everything runs on loopback; every loop is bounded.

    .venv/bin/python bench/serve_bench.py [--model smollm2|DIR] [--rounds 3] [--max-tokens 32]
                                          [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about apples.",
    "Explain what a unit test is in two sentences.",
    "List three colors.",
    "How do I list the files in a directory with bash?",
]


def start_server(model: str, threads: int) -> tuple[subprocess.Popen[str], str]:
    # --no-prefix-cache: the server does the same work as `generate` (no prompt tokens skipped)
    cmd = [sys.executable, "-m", "orchard_cli.main", "serve", "--model", model, "--port", "0",
           "--threads", str(threads), "--format", "json", "--no-prefix-cache"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise SystemExit("orchard serve did not start")
    return proc, json.loads(line)["base_url"]


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_generate(model: Any, messages: list[dict[str, Any]], max_tokens: int) -> tuple[float, list[int]]:
    import torch

    ids = torch.tensor([model.encode_chat(messages)])
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                                   do_sample=False, eos_token_id=sorted(model.stop_ids),
                                   pad_token_id=min(model.stop_ids))
    elapsed = time.perf_counter() - started
    new = out[0, ids.shape[1]:].tolist()
    while new and new[-1] in model.stop_ids:  # the server does not count the stop token either
        new.pop()
    return elapsed, new


def run_server(client: Any, url: str, messages: list[dict[str, Any]], max_tokens: int,
               stream: bool) -> tuple[float, list[int], float | None]:
    from orchard_cli.proxy.sse import assemble_chat_stream

    body = {"model": "bench", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "return_token_ids": True, "stream": stream}
    started = time.perf_counter()
    if not stream:
        answer = client.post(f"{url}/chat/completions", json=body).json()
        return time.perf_counter() - started, answer["choices"][0].get("token_ids") or [], None
    first, blob = None, b""
    with client.stream("POST", f"{url}/chat/completions", json=body) as resp:
        for part in resp.iter_bytes():
            if first is None and b'"content":"' in part and b'"content":""' not in part:
                first = time.perf_counter() - started
            blob += part
    elapsed = time.perf_counter() - started
    return elapsed, assemble_chat_stream(blob)["choices"][0].get("token_ids") or [], first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args()

    import httpx

    from orchard_cli.models.local_model import load_model

    print(f"# loading {args.model} in this process and in `orchard serve`...", file=sys.stderr)
    model = load_model(args.model, threads=args.threads)
    proc, url = start_server(args.model, args.threads)
    results: dict[str, list[dict[str, Any]]] = {"generate": [], "serve": [], "stream": []}
    same = True
    try:
        with httpx.Client(timeout=600) as client:
            run_server(client, url, [{"role": "user", "content": "Hi"}], 2, False)  # warm both up
            run_generate(model, [{"role": "user", "content": "Hi"}], 2)
            for round_ in range(args.rounds):
                for n, prompt in enumerate(PROMPTS):
                    messages = [{"role": "user", "content": prompt}]
                    order = ["generate", "serve", "stream"]
                    order = order[(round_ + n) % 3:] + order[:(round_ + n) % 3]
                    tokens: dict[str, list[int]] = {}
                    for mode in order:
                        if mode == "generate":
                            cpu = time.thread_time()
                            elapsed, ids = run_generate(model, messages, args.max_tokens)
                            cpu, ttft = time.thread_time() - cpu, None
                        else:
                            cpu = process_cpu(proc.pid)
                            elapsed, ids, ttft = run_server(client, url, messages, args.max_tokens,
                                                            mode == "stream")
                            cpu = process_cpu(proc.pid) - cpu
                        tokens[mode] = ids
                        results[mode].append({"prompt": n, "tokens": len(ids), "seconds": elapsed, "cpu_s": cpu,
                                              "tok_s": len(ids) / elapsed if elapsed else 0.0, "ttft_s": ttft})
                    same = same and tokens["generate"] == tokens["serve"] == tokens["stream"]
                print(f"# round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(30)

    def per_cpu(runs: list[dict[str, Any]]) -> float:
        return sum(r["tokens"] for r in runs) / max(sum(r["cpu_s"] for r in runs), 1e-9)

    base = statistics.median(r["tok_s"] for r in results["generate"])
    base_cpu = per_cpu(results["generate"])
    rows = []
    for mode, runs in results.items():
        med = statistics.median(r["tok_s"] for r in runs)
        ttfts = [r["ttft_s"] for r in runs if r["ttft_s"] is not None]
        rows.append({"mode": mode, "requests": len(runs), "tokens": sum(r["tokens"] for r in runs),
                     "median_tok_s": med, "min_tok_s": min(r["tok_s"] for r in runs),
                     "max_tok_s": max(r["tok_s"] for r in runs), "ratio": med / base if base else 0.0,
                     "tok_per_cpu_s": per_cpu(runs), "cpu_ratio": per_cpu(runs) / base_cpu,
                     "median_ttft_s": statistics.median(ttfts) if ttfts else None})
    print(f"\nmodel {args.model}, {args.threads} thread(s), max_tokens {args.max_tokens}, greedy, "
          f"{len(PROMPTS)} prompts x {args.rounds} rounds; same tokens every way: {'yes' if same else 'NO'}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'mode':<10}{'requests':>9}{'tokens':>8}{'median tok/s':>14}{'min':>8}{'max':>8}"
          f"{'vs generate':>13}{'tok/CPU-s':>11}{'vs generate':>13}{'ttft (s)':>10}")
    for row in rows:
        ttft = f"{row['median_ttft_s']:.2f}" if row["median_ttft_s"] is not None else "-"
        print(f"{row['mode']:<10}{row['requests']:>9}{row['tokens']:>8}{row['median_tok_s']:>14.2f}"
              f"{row['min_tok_s']:>8.2f}{row['max_tok_s']:>8.2f}{row['ratio']:>12.2f}x"
              f"{row['tok_per_cpu_s']:>11.2f}{row['cpu_ratio']:>12.2f}x{ttft:>10}")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"args": vars(args), "same_tokens": same, "rows": rows, "runs": results}, fh, indent=2)


if __name__ == "__main__":
    main()
