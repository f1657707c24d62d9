"""Recording-proxy benchmark: what does a proxy add on top of a direct call?

One run, one scripted upstream (an aiohttp server in its own process), four ways to reach it:
  direct   the client calls the upstream itself
  bare     a ~60-line aiohttp pass-through proxy (below), no recording: the floor for a proxy
  orchard  `orchard proxy` (recording every call to a JSONL file)
  litellm  LiteLLM's proxy (litellm[proxy]==1.108.7 in its own venv under ORCHARD_HOME/cache/bench)

Measures, for a tiny non-streamed chat completion: added latency per call (median, p99) with one
client; time to the first streamed byte; calls per second with 32 concurrent clients; CPU per
call and memory of each proxy process. Latency and TTFB rounds rotate through the targets so that
machine noise hits them alike. Everything is on loopback; every loop is bounded.

    .venv/bin/python bench/proxy_bench.py [--calls 600] [--duration 4] [--no-litellm] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

LITELLM = "litellm[proxy]==1.108.7"
ROUNDS = 4  # throughput slices per target
BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}


# -- the bare pass-through proxy (no recording) -------------------------------------------------
def serve_bare(upstream: str) -> None:
    from aiohttp import ClientSession, TCPConnector, web

    state: dict = {}

    async def startup(app: web.Application) -> None:
        state["session"] = ClientSession(connector=TCPConnector(limit=512), auto_decompress=False)

    async def cleanup(app: web.Application) -> None:
        await state["session"].close()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        url = upstream + request.path[len("/v1"):]
        async with state["session"].post(url, data=body, headers=headers) as up:
            ctype = up.headers.get("Content-Type", "application/json")
            if not ctype.startswith("text/event-stream"):
                return web.Response(body=await up.read(), status=up.status, headers={"Content-Type": ctype})
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": ctype})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    async def main() -> None:
        app = web.Application()
        app.on_startup.append(startup)
        app.on_cleanup.append(cleanup)
        app.router.add_post("/v1/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        print(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# -- processes ------------------------------------------------------------------------------------
def spawn(cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    err = open(log, "wb") if log else subprocess.DEVNULL
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env or os.environ.copy())


def first_line(proc: subprocess.Popen, what: str) -> str:
    line = proc.stdout.readline().decode().strip() if proc.stdout else ""
    if not line:
        raise SystemExit(f"{what} did not start (exit {proc.poll()})")
    return line


def litellm_python(venv: Path) -> Path | None:
    exe = venv / "bin" / "litellm"
    if exe.exists():
        return exe
    print(f"# installing {LITELLM} into {venv} (separate venv, once)...", file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", LITELLM], check=True, timeout=1200,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"# litellm could not be installed: {exc}", file=sys.stderr)
        return None
    return exe if exe.exists() else None


def start_litellm(exe: Path, upstream: str, work: Path) -> tuple[subprocess.Popen, str, str]:
    key = f"sk-{secrets.token_hex(24)}"
    port = free_port()
    config = work / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: bench\n    litellm_params:\n      model: openai/bench\n"
        f"      api_base: {upstream}\n      api_key: unused\n"
        "general_settings:\n  master_key: os.environ/LITELLM_MASTER_KEY\n")
    env = {**os.environ, "LITELLM_MASTER_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_LOG": "ERROR"}
    proc = subprocess.Popen([str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=open(work / "litellm.log", "wb"), env=env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/liveliness", timeout=2):
                return proc, f"http://127.0.0.1:{port}/v1", key
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"litellm did not become healthy; see {work / 'litellm.log'}")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of a process and its children, from /proc."""
    pids, cpu, rss = {pid}, 0.0, 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    pids.add(int(entry.name))
            except OSError:
                continue
    tick = os.sysconf("SC_CLK_TCK")
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            rss += int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except OSError:
            continue
    return cpu, rss


# -- measurements ---------------------------------------------------------------------------------
async def timed_call(session, url: str, headers: dict, stream: bool) -> float:
    body = json.dumps({**BODY, "stream": stream}).encode()
    start = time.perf_counter()
    async with session.post(f"{url}/chat/completions", data=body, headers=headers) as resp:
        if stream:
            await resp.content.readany()
            first = time.perf_counter() - start
            await resp.read()
        else:
            await resp.read()
            first = time.perf_counter() - start
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}")
    return first


async def rotate(targets: dict, calls: int, stream: bool, block: int = 25) -> dict[str, list[float]]:
    import aiohttp

    out: dict[str, list[float]] = {name: [] for name in targets}
    sessions = {name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for name in targets}
    try:
        for name, (url, headers) in targets.items():  # warm-up
            for _ in range(20):
                await timed_call(sessions[name], url, headers, stream)
        for _ in range(max(1, calls // block)):
            for name, (url, headers) in targets.items():
                for _ in range(block):
                    out[name].append(await timed_call(sessions[name], url, headers, stream))
    finally:
        for session in sessions.values():
            await session.close()
    return out


async def throughput(url: str, headers: dict, clients: int, duration: float) -> tuple[int, float]:
    import aiohttp

    done = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        deadline = time.perf_counter() + duration

        async def worker() -> None:
            nonlocal done
            for _ in range(100_000):  # bounded
                if time.perf_counter() >= deadline:
                    return
                await timed_call(session, url, headers, False)
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return done, time.perf_counter() - start


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the run --------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict:
    from orchard_cli.home import orchard_home

    work = Path(tempfile.mkdtemp(prefix="orchard-proxy-bench-"))
    procs: dict[str, subprocess.Popen] = {}
    try:
        procs["upstream"] = spawn([sys.executable, "-m", "orchard_cli.models.scripted", "--port", "0",
                                   "--reply", "Hi there, how can I help?", "--cycle"])
        upstream = first_line(procs["upstream"], "the scripted upstream")
        procs["bare"] = spawn([sys.executable, __file__, "--serve-bare", upstream])
        targets: dict[str, tuple[str, dict]] = {"direct": (upstream, {}),
                                                "bare": (first_line(procs["bare"], "the bare proxy"), {})}
        calls_file = work / "calls.jsonl"
        procs["orchard"] = spawn([sys.executable, "-m", "orchard_cli.main", "proxy", "--upstream", upstream,
                                  "--port", "0", "--out", str(calls_file), "--format", "json"],
                                 env={**os.environ, "ORCHARD_HOME": str(work / "home")}, log=work / "orchard.log")
        targets["orchard"] = (json.loads(first_line(procs["orchard"], "orchard proxy"))["base_url"], {})
        litellm_note = "not run (--no-litellm)"
        if not args.no_litellm:
            exe = litellm_python(Path(args.litellm_venv or orchard_home() / "cache" / "bench" / "litellm-1.108.7"))
            if exe is None:
                litellm_note = f"not installed: pip install '{LITELLM}' failed"
            else:
                proc, url, key = start_litellm(exe, upstream, work)
                procs["litellm"] = proc
                targets["litellm"] = (url, {"Authorization": f"Bearer {key}"})
                litellm_note = ""
        print(f"# targets ready: {', '.join(targets)}; measuring...", file=sys.stderr)

        latency = asyncio.run(rotate(targets, args.calls, stream=False))
        ttfb = asyncio.run(rotate(targets, max(100, args.calls // 3), stream=True))
        results: dict = {"calls": args.calls, "clients": args.clients, "duration_s": args.duration,
                         "litellm_note": litellm_note, "targets": {}}
        load = {name: [0, 0.0, 0.0, 0.0] for name in targets}  # calls, seconds, CPU seconds, RSS
        for _ in range(ROUNDS):  # throughput in slices, rotating through the targets too
            for name, (url, headers) in targets.items():
                pid = procs["upstream" if name == "direct" else name].pid
                cpu0, _ = tree_stats(pid)
                done, elapsed = asyncio.run(throughput(url, headers, args.clients, args.duration / ROUNDS))
                cpu1, rss = tree_stats(pid)
                total = load[name]
                total[0] += done
                total[1] += elapsed
                total[2] += cpu1 - cpu0
                total[3] = max(total[3], rss)
        for name in targets:
            done, elapsed, cpu, rss = load[name]
            results["targets"][name] = {
                "median_ms": statistics.median(latency[name]) * 1e3, "p99_ms": pct(latency[name], 0.99) * 1e3,
                "ttfb_median_ms": statistics.median(ttfb[name]) * 1e3, "calls_per_s": done / elapsed,
                "cpu_ms_per_call": cpu / max(done, 1) * 1e3, "rss_mib": rss}
        procs["orchard"].terminate()
        procs["orchard"].wait(30)
        results["orchard_lines_recorded"] = sum(1 for _ in open(calls_file, "rb")) if calls_file.exists() else 0
        return results
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def render(results: dict) -> str:
    t = results["targets"]
    direct = t["direct"]
    rows = ["| target | median ms | added median ms | added p99 ms | TTFB added ms | calls/s @%d | "
            "CPU ms/call | RSS MiB |" % results["clients"], "|---|---|---|---|---|---|---|---|"]
    for name, r in t.items():
        cpu = "(upstream)" if name == "direct" else f"{r['cpu_ms_per_call']:.2f}"
        rss = "(upstream)" if name == "direct" else f"{r['rss_mib']:.0f}"
        rows.append(f"| {name} | {r['median_ms']:.3f} | {r['median_ms'] - direct['median_ms']:+.3f} | "
                    f"{r['p99_ms'] - direct['p99_ms']:+.3f} | {r['ttfb_median_ms'] - direct['ttfb_median_ms']:+.3f} | "
                    f"{r['calls_per_s']:.0f} | {cpu} | {rss} |")
    if "litellm" not in t:
        rows.append(f"| litellm | {results['litellm_note']} | | | | | | |")

    def added(name: str, key: str = "median_ms") -> float:
        return max(t[name][key] - direct[key], 1e-3)

    lines = ["", *rows, ""]
    lines.append(f"orchard overhead / bare overhead (median latency): {added('orchard') / added('bare'):.2f}x "
                 "(goal <= 1.3)")
    lines.append(f"orchard overhead / bare overhead (TTFB): "
                 f"{added('orchard', 'ttfb_median_ms') / added('bare', 'ttfb_median_ms'):.2f}x")
    lines.append(f"orchard added median: {added('orchard'):.3f} ms (goal < 1 ms)")
    lines.append(f"proxy CPU per call, orchard / bare: "
                 f"{t['orchard']['cpu_ms_per_call'] / t['bare']['cpu_ms_per_call']:.2f}x (the recording's cost, "
                 "least sensitive to other load on the machine)")
    if "litellm" in t:
        lines.append(f"litellm overhead / orchard overhead (median latency): "
                     f"{added('litellm') / added('orchard'):.1f}x (goal >= 10)")
        lines.append(f"orchard calls/s / litellm calls/s @{results['clients']}: "
                     f"{t['orchard']['calls_per_s'] / t['litellm']['calls_per_s']:.1f}x")
    lines.append(f"orchard recorded {results['orchard_lines_recorded']} calls to its JSONL file")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=600, help="sequential calls per target (latency)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (throughput)")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds of load per target")
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's proxy")
    parser.add_argument("--litellm-venv", help="venv holding litellm (default under ORCHARD_HOME/cache)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--serve-bare", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare:
        serve_bare(args.serve_bare)
        return
    results = run(args)
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
