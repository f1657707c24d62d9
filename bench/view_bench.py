"""The run viewer at scale: a synthetic run of N episodes, its site written, then opened in Chromium.

The run is shaped like a real agent run on a check-graded web suite: per episode a results row,
a task, an evidence file (answer, 6 tool dispatches with page text, a service-state change), a
verdict with 4 checks, 6 step screenshots (every 5th episode; hard links to one real PNG) and a
trajectory of 4 model calls with their messages. Measured:

  build      `orchard view RUN` (build_site): seconds, peak RSS of this process, site size on disk
  first paint         Chromium's first-contentful-paint of index.html (file://)
  list ready          until the first page of the episode table is in the DOM
  JS heap             the page's used JS heap once the list is drawn (CDP Performance metrics)
  filter              selecting an outcome until the table is redrawn
  open episode        clicking a row until its steps are drawn

and, for the same run, the one-page HTML `orchard view FILE --out page.html` wrote before (every
episode in one document): its size, first paint and heap (at N = 1,000 only by default: at
10,000 it is hundreds of MB).

Usage: .venv/bin/python bench/view_bench.py [--n 1000 --n 10000] [--old-max 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ORCHARD_HOME", tempfile.mkdtemp(prefix="orchard-bench-"))

from orchard_cli.records import JsonlWriter, write_json, write_text  # noqa: E402
from orchard_cli.scoring import Reproducibility, compute_scorecard  # noqa: E402

CATS = ["resolved"] * 5 + ["unresolved"] * 3 + ["unsafe", "infra_error", "timeout"]
PAGE_TEXT = "\n".join(f"- link \"item {i}\" [ref=e{i}]" for i in range(120))


def _png(folder: Path) -> Path:
    """A real 1280x720 screenshot-sized PNG (a page rendered by Chromium would do; this is zlib)."""
    import struct
    import zlib

    width, height = 1280, 720
    rows = b"".join(b"\x00" + bytes([(x * 7 + y) % 256 for x in range(width)] * 3)[: width * 3] for y in range(height))
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) \
        + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b"")
    path = folder / "page.png"
    path.write_bytes(data)
    return path


def _call(episode: str, seq: int, history: list[dict]) -> dict:
    answer = {"role": "assistant", "content": None,
              "tool_calls": [{"id": f"c{seq}", "type": "function",
                              "function": {"name": "click", "arguments": json.dumps({"bid": f"e{seq}"})}}]}
    return {"schema_version": 1, "id": f"{episode}-{seq}", "episode": episode, "seq": seq, "endpoint": "chat",
            "upstream_endpoint": "chat", "status": 200, "model": "m",
            "request": {"model": "m", "messages": history}, "response": {
                "id": "r", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": answer, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 900 + 300 * seq, "completion_tokens": 40, "total_tokens": 940 + 300 * seq}},
            "usage": {"input_tokens": 900 + 300 * seq, "output_tokens": 40, "total_tokens": 940 + 300 * seq},
            "attempts": 1, "timing": {"started_at": 0.0, "ended_ms": 800.0}}


def make_run(root: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    run = root / f"run-{n}"
    (run / "logs").mkdir(parents=True)
    png = _png(root)
    results = JsonlWriter(run / "results.jsonl")
    trajectories = JsonlWriter(run / "trajectories.jsonl")
    tasks = []
    rows = []
    for i in range(n):
        task = f"shop-task-{i // 2:05d}"
        attempt = i % 2 + 1
        episode = f"ep-{i:08x}"
        category = rng.choice(CATS)
        log = run / "logs" / task / f"attempt-{attempt}"
        log.mkdir(parents=True)
        dispatches = [{"seq": k, "tool": rng.choice(["goto", "click", "fill"]), "arguments": {"bid": f"e{k}"},
                       "status": 200, "result": PAGE_TEXT} for k in range(6)]
        evidence = {"schema_version": 1, "answer": "the blue mug", "dispatches": dispatches,
                    "state": {"shop": {"cart": [{"sku": "mug", "qty": 1 + i % 3}]}},
                    "state_before": {"shop": {"cart": []}}}
        write_json(log / "evidence.json", evidence)
        checks = {f"check_{k}": category == "resolved" or k < 2 for k in range(4)}
        outcome = {"schema_version": 1, "resolved": category == "resolved", "category": category,
                   "tests": {"checks": checks, "check_kinds": {k: "state" for k in checks},
                             "score": sum(checks.values()) / 4}, "error": "sandbox died" if category == "infra_error" else None}
        write_json(log / "outcome.json", outcome)
        shot = None
        if i % 5 == 0:
            for k in range(6):
                os.link(png, log / f"step-{k:03d}.png")
            os.link(png, log / "last-screenshot.png")
            shot = f"logs/{task}/attempt-{attempt}/last-screenshot.png"
        history = [{"role": "system", "content": "You are a web agent. " * 40},
                   {"role": "user", "content": f"Buy the blue mug for task {task}."}]
        calls = []
        for seq in range(4):
            calls.append(_call(episode, seq, list(history)))
            history += [calls[-1]["response"]["choices"][0]["message"],
                        {"role": "tool", "tool_call_id": f"c{seq}", "content": PAGE_TEXT}]
        trajectories.write({"schema_version": 2, "episode_id": episode, "task_id": task, "suite": "shop-big",
                            "family": "web", "harness": "web", "model": "m", "attempt": attempt,
                            "problem_statement": f"Buy the blue mug for task {task}.", "calls": calls,
                            "messages": history, "outcome": {"resolved": category == "resolved", "category": category,
                                                             "reward": float(category == "resolved"), "details": {}},
                            "evidence": evidence, "duration_seconds": 30.0, "tokens_in": 6000, "tokens_out": 160})
        row = {"schema_version": 1, "instance_id": task, "attempt": attempt, "episode_id": episode,
               "groups": {"site": "shop", "category": f"shop/{['cart', 'search', 'checkout'][i // 2 % 3]}"},
               "resolved": category == "resolved", "category": category, "checks": checks,
               "check_kinds": {k: "state" for k in checks}, "score": sum(checks.values()) / 4,
               "duration_seconds": round(rng.uniform(5, 90), 1), "log_dir": f"logs/{task}/attempt-{attempt}",
               "error": outcome["error"], "model": "m", "tokens_in": 6000, "tokens_out": 160, "cost_usd": None,
               "trajectory": "trajectories.jsonl", "steps": 6, "screenshot": shot}
        results.write(row)
        rows.append(row)
        if attempt == 1:
            tasks.append({"schema_version": 1, "task_id": task, "suite": "shop-big", "family": "web",
                          "problem_statement": f"Buy the blue mug for task {task}."})
    results.close()
    trajectories.close()
    write_text(run / "tasks.jsonl", "".join(json.dumps(t) + "\n" for t in tasks))
    card = compute_scorecard(rows, suite="shop-big", source="model:m@web", family="web",
                             reproducibility=Reproducibility(orchard_version="bench"), expected=n)
    write_json(run / "scorecard.json", card)
    write_json(run / "config.json", {"schema_version": 1, "suite": "shop-big", "source": "model:m@web"})
    return run


def _size(path: Path) -> int:
    """Bytes on disk, a hard-linked file counted once (the site links its screenshots)."""
    seen: dict[tuple[int, int], int] = {}
    for p in path.rglob("*"):
        if p.is_file():
            st = p.stat()
            seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


def browse(url: str, list_ready: str | None, *, steps: bool) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    from orchard_cli.tasks.kit.browser import browser_binary

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_binary())
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        started = time.monotonic()
        page.goto(url, wait_until="commit", timeout=600_000)
        if list_ready:
            page.wait_for_selector(list_ready, timeout=600_000)
        else:
            page.wait_for_load_state("load", timeout=600_000)
        ready = time.monotonic() - started
        paint = page.evaluate("(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || null")
        metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        out = {"first_paint_s": round((paint or 0) / 1000, 3), "ready_s": round(ready, 3),
               "js_heap_mb": round(metrics.get("JSHeapUsedSize", 0) / 2**20, 1),
               "dom_nodes": int(metrics.get("Nodes", 0))}
        if steps:
            t = time.monotonic()
            page.select_option("select[aria-label=outcome]", "unsafe")
            page.wait_for_function("document.getElementById('count').textContent.includes('filtered')")
            out["filter_s"] = round(time.monotonic() - t, 3)
            t = time.monotonic()
            page.click("#episodes tbody tr")
            page.wait_for_selector("#steps")
            out["open_episode_s"] = round(time.monotonic() - t, 3)
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, action="append", help="episodes (repeat); default 1000 and 10000")
    parser.add_argument("--old-max", type=int, default=1000, help="largest N for the old one-page HTML")
    args = parser.parse_args()
    from orchard_cli.view import render_page
    from orchard_cli.trajectory import read_trajectories
    from orchard_cli.viewer import build_site, open_source

    root = Path(tempfile.mkdtemp(prefix="orchard-view-bench-"))
    table = []
    try:
        for n in args.n or [1000, 10000]:
            t = time.monotonic()
            run = make_run(root, n)
            made = time.monotonic() - t
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t = time.monotonic()
            report = build_site(open_source(run), run / "view")
            build = time.monotonic() - t
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            index_mb = (run / "view" / "data" / "index.js").stat().st_size / 2**20
            row = {"n": n, "make_s": round(made, 1), "build_s": round(build, 1), "peak_rss_mb": round(max(rss, before) / 1024),
                   "index_mb": round(index_mb, 2), "site_mb": round(_size(run / "view") / 2**20, 1),
                   "screenshots": report["screenshots"],
                   **browse((run / "view" / "index.html").as_uri(), "#episodes tbody tr", steps=True)}
            table.append(("site", row))
            print(json.dumps({"viewer": "site", **row}), flush=True)
            if n <= args.old_max:
                t = time.monotonic()
                page = run / "old.html"
                page.write_text(render_page(read_trajectories(run / "trajectories.jsonl"), "old"), encoding="utf-8")
                old = {"n": n, "build_s": round(time.monotonic() - t, 1), "page_mb": round(page.stat().st_size / 2**20, 1),
                       **browse(page.as_uri(), None, steps=False)}
                table.append(("one page (before)", old))
                print(json.dumps({"viewer": "one page (before)", **old}), flush=True)
            shutil.rmtree(run)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n| viewer | N | build s | first paint s | ready s | JS heap MB | DOM nodes | size MB | filter s | open s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, r in table:
        size = r.get("site_mb", r.get("page_mb"))
        print(f"| {name} | {r['n']:,} | {r['build_s']} | {r['first_paint_s']} | {r['ready_s']} | {r['js_heap_mb']} | "
              f"{r['dom_nodes']:,} | {size} | {r.get('filter_s', '–')} | {r.get('open_episode_s', '–')} |")
    print(f"\nload average: {open('/proc/loadavg').read().strip()}", file=sys.stderr)


if __name__ == "__main__":
    main()
