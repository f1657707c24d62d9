"""Microsoft's `orchard_env` SDK against orchard's Orchard Env service, unchanged.

Runs the SDK's own programs, as their authors run them, on each backend (local, docker):

  examples/getting_started.py     each of the 11 examples on its own (sync, async, files, patch,
                                  errors, sessions, PTY sync and async, concurrency)
  tests/integration/bench_concurrent.py --num N   full lifecycle of N sandboxes at once
  tests/integration/soak.py --mode both           sync and async clients with idle gaps longer
                                                  than uvicorn's default keep-alive

and prints one table: pass/fail per program and backend, with bench_concurrent's create, exec and
delete latencies (median, p90) next to the SDK's published figure (0.28 s average command latency,
README, at 1,000 sandboxes on Kubernetes: another machine and scale, shown for scale only).

The SDK is not vendored: point --sdk at the `orchard_env` folder of a checkout of
github.com/microsoft/Orchard (its examples/ and tests/integration/ are run from there). Its client
needs requests, aiohttp and websocket-client, installed pinned in a venv under the bench home.

The programs ask for the images `python:3.11-slim` and `ubuntu:22.04`. No registry is reachable
here, so where the docker engine lacks them the bench builds stand-ins from orchard's Debian base
image (`python` on PATH, pip from PyPI) and says so; with a registry, pull the real ones first. The
local backend runs them from the engine's copy (ORCHARD_LOCAL_IMAGES overrides).

    .venv/bin/python bench/sdk_compat.py --sdk ~/src/Orchard/orchard_env [--backends local,docker]
        [--num 10] [--rounds 8] [--json out.json]
    .venv/bin/python bench/sdk_compat.py --sdk ... --backends local --only-concurrent --num 1000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLES = ["basic", "files", "env", "patch", "resources", "errors", "session", "pty", "async",
            "concurrent", "pty-async"]
CLIENT_PINS = ["requests==2.34.2", "aiohttp==3.14.5", "websocket-client==1.9.2"]
PIP_PIN = "pip==26.0.1"
PUBLISHED_EXEC_AVG = 0.28  # seconds, the SDK README's average command latency
REPO = Path(__file__).resolve().parents[1]
ORCHARD = [str(Path(sys.executable).with_name("orchard"))]  # the venv's entry point
PROGRAM_TIMEOUT = 900


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def sdk_python(home: Path) -> str:
    venv = home / "sdk-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        say(f"SDK client venv: {venv} ({', '.join(CLIENT_PINS)})")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *CLIENT_PINS], check=True)
    return str(python)


def _has_image(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


def stand_in_images(home: Path) -> list[str]:
    """Build python:3.11-slim and ubuntu:22.04 from orchard's base image where the engine lacks
    them; the names of those built."""
    from orchard_cli.env.images import ensure_base_image

    built = []
    base = None
    for name in ("ubuntu:22.04", "python:3.11-slim"):
        if _has_image(name):
            continue
        base = base or ensure_base_image()
        if name.startswith("ubuntu"):
            subprocess.run(["docker", "tag", base, name], check=True)
        else:
            context = home / "python-image"
            context.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(context),
                            PIP_PIN], check=True)
            wheel = next(context.glob("pip-*.whl")).name
            (context / "Dockerfile").write_text(
                f"FROM {base}\nCOPY {wheel} /tmp/\n"
                f"RUN ln -sf python3 /usr/bin/python && python3 /tmp/{wheel}/pip install --quiet --no-index "
                f"--break-system-packages /tmp/{wheel} && rm /tmp/{wheel}\n")
            subprocess.run(["docker", "build", "-q", "-t", name, str(context)], check=True,
                           stdout=subprocess.DEVNULL)
        built.append(name)
    return built


class Service:
    def __init__(self, backend: str, home: Path) -> None:
        self.backend, self.home = backend, home
        self.env = {**os.environ, "ORCHARD_HOME": str(home)}

    def __enter__(self) -> "Service":
        up = subprocess.run([*ORCHARD, "env", "up", "--detach", "--backend", self.backend, "--port", "0"],
                            env=self.env, capture_output=True, text=True, timeout=300)
        if up.returncode != 0:
            raise SystemExit(f"orchard env up --backend {self.backend} failed: {up.stderr.strip()}")
        self.url = json.loads((self.home / "env" / "service.json").read_text())["url"]
        self.key = (self.home / "env" / "api-key").read_text().strip()
        return self

    def __exit__(self, *_: object) -> None:
        subprocess.run([*ORCHARD, "env", "down"], env=self.env, capture_output=True, timeout=300)


def run_program(python: str, sdk: Path, service: Service, args: list[str], log: Path) -> tuple[bool, float]:
    env = {**os.environ, "SANDBOX_BASE_URL": service.url, "SANDBOX_API_KEY": service.key,
           "PYTHONPATH": str(sdk), "PYTHONUNBUFFERED": "1"}
    env.pop("SANDBOX_PREFIX", None)
    started = time.perf_counter()
    with open(log, "w") as out:
        try:
            done = subprocess.run([python, *args], cwd=sdk, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=PROGRAM_TIMEOUT)
            passed = done.returncode == 0
        except subprocess.TimeoutExpired:
            out.write(f"\n[bench] timed out after {PROGRAM_TIMEOUT}s\n")
            passed = False
    return passed, time.perf_counter() - started


def _stats(durations: list[float]) -> str:
    if not durations:
        return "-"
    ordered = sorted(durations)
    p90 = ordered[max(0, int(len(ordered) * 0.9) - 1)]
    return f"{statistics.median(ordered):.3f} / {p90:.3f}"


def concurrent_figures(timing: Path) -> dict[str, object]:
    records = json.loads(timing.read_text()).get("records", [])
    ops: dict[str, list[float]] = {"create": [], "exec": [], "delete": []}
    failed = 0
    for record in records:
        kind = "exec" if record["operation"].startswith("exec") else record["operation"]
        if not record.get("success"):
            failed += 1
        elif kind in ops:
            ops[kind].append(record["duration"])
    return {"records": len(records), "failed": failed, **ops}


def run_backend(backend: str, sdk: Path, python: str, args: argparse.Namespace, logs: Path) -> dict:
    result: dict[str, object] = {"backend": backend, "programs": {}}
    home = Path(tempfile.mkdtemp(prefix=f"orchard-sdk-{backend}-"))
    with Service(backend, home) as service:
        say(f"[{backend}] service at {service.url}")
        for name in [] if args.only_concurrent else EXAMPLES:
            passed, seconds = run_program(python, sdk, service, ["examples/getting_started.py", name],
                                          logs / f"{backend}-example-{name}.log")
            result["programs"][f"example {name}"] = (passed, seconds)
            say(f"[{backend}] example {name}: {'pass' if passed else 'FAIL'} ({seconds:.1f}s)")
        timing = logs / f"{backend}-bench_concurrent.json"
        passed, seconds = run_program(
            python, sdk, service,
            ["tests/integration/bench_concurrent.py", "--url", service.url, "--api-key", service.key,
             "--num", str(args.num), "--image", "python:3.11-slim", "--cpu", "1", "--memory", "1Gi",
             "--save-timing", str(timing)], logs / f"{backend}-bench_concurrent.log")
        figures = concurrent_figures(timing) if timing.exists() else {"records": 0, "failed": 0}
        passed = passed and figures["records"] > 0 and figures["failed"] == 0
        result["programs"][f"bench_concurrent --num {args.num}"] = (passed, seconds)
        result["concurrent"] = figures
        say(f"[{backend}] bench_concurrent: {'pass' if passed else 'FAIL'} ({seconds:.1f}s)")
        if not args.only_concurrent:
            passed, seconds = run_program(
                python, sdk, service,
                ["tests/integration/soak.py", "--mode", "both", "--rounds", str(args.rounds),
                 "--min-idle", "1", "--max-idle", str(args.max_idle)], logs / f"{backend}-soak.log")
            result["programs"][f"soak --mode both --rounds {args.rounds}"] = (passed, seconds)
            say(f"[{backend}] soak: {'pass' if passed else 'FAIL'} ({seconds:.1f}s)")
    shutil.rmtree(home, ignore_errors=True)  # after `orchard env down`, which reads the home
    return result


def report(results: list[dict], built: list[str], logs: Path) -> list[str]:
    backends = [r["backend"] for r in results]
    lines = ["Microsoft orchard_env SDK programs against orchard's Orchard Env (pass, seconds)", ""]
    lines.append(f"  {'program':<34}" + "".join(f"{b:>16}" for b in backends))
    for program in results[0]["programs"]:
        cells = []
        for r in results:
            passed, seconds = r["programs"][program]
            cells.append(f"{'pass' if passed else 'FAIL'} {seconds:6.1f}s")
        lines.append(f"  {program:<34}" + "".join(f"{c:>16}" for c in cells))
    lines += ["", "bench_concurrent latencies, seconds (median / p90; SDK client timings)", ""]
    lines.append(f"  {'operation':<34}" + "".join(f"{b:>16}" for b in backends))
    for op in ("create", "exec", "delete"):
        lines.append(f"  {op:<34}" + "".join(f"{_stats(r['concurrent'].get(op, [])):>16}" for r in results))
    averages = []
    for r in results:
        execs = r["concurrent"].get("exec", [])
        averages.append(f"{statistics.mean(execs):.3f}" if execs else "-")
    lines.append(f"  {'exec average (ours)':<34}" + "".join(f"{a:>16}" for a in averages))
    lines.append(f"  {'exec average (SDK README, k8s)':<34}" + "".join(f"{PUBLISHED_EXEC_AVG:>16.3f}"
                                                                        for _ in results))
    ratios = [f"x{float(a) / PUBLISHED_EXEC_AVG:.2f}" if a != "-" else "-" for a in averages]
    lines.append(f"  {'ours / published':<34}" + "".join(f"{x:>16}" for x in ratios))
    if built:
        lines += ["", f"stand-in images built from orchard's Debian base (no registry here): {', '.join(built)}"]
    lines.append(f"logs: {logs}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sdk", type=Path, required=True,
                        help="the orchard_env folder of a github.com/microsoft/Orchard checkout")
    parser.add_argument("--backends", default="local,docker")
    parser.add_argument("--num", type=int, default=10, help="bench_concurrent's sandboxes at once")
    parser.add_argument("--rounds", type=int, default=8, help="soak's commands per sandbox and client")
    parser.add_argument("--max-idle", type=float, default=12.0,
                        help="soak's longest idle gap (past uvicorn's default 5 s keep-alive)")
    parser.add_argument("--only-concurrent", action="store_true",
                        help="only bench_concurrent (the scale run: --num 200, --num 1000)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    sdk = args.sdk.expanduser().resolve()
    if not (sdk / "examples" / "getting_started.py").is_file() or not (sdk / "orchard_env").is_dir():
        print(f"error: {sdk} is not the SDK's orchard_env folder (no examples/getting_started.py)",
              file=sys.stderr)
        return 2
    home = Path(os.environ.get("ORCHARD_HOME") or Path.home() / ".orchard") / "cache" / "bench-sdk"
    home.mkdir(parents=True, exist_ok=True)
    python = sdk_python(home)
    built = stand_in_images(home)
    logs = Path(tempfile.mkdtemp(prefix="orchard-sdk-logs-"))
    results = [run_backend(b.strip(), sdk, python, args, logs) for b in args.backends.split(",") if b.strip()]
    print("\n".join(report(results, built, logs)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    ok = all(passed for r in results for passed, _ in r["programs"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
