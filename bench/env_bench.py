"""Orchard Env benchmark: exec round trip, sandbox lifecycle, and N sandboxes at once.

Everything is measured side by side in one run and printed as one table (medians, p90, ratios):

  exec `true`        floor: subprocess.run(["true"]) | local in-process | local over HTTP |
                     docker in-process | raw `docker exec` CLI on the same container
  create->ready->destroy   local | docker | raw `docker run --rm` (goal: docker at most 1.0x);
                     docker's destroy returns once nothing in the container runs (the engine
                     removes it, as with --rm, before the next timed call starts), so one more
                     row waits until it is removed
  N local sandboxes alive at once (goal at N = 1,000: under 26 s, the published cluster figure,
  under 5 MiB each), each running a command; memory, descriptors and threads per sandbox; the
  open-files limit; what is left afterwards (folders, cgroups, processes)

Usage: .venv/bin/python bench/env_bench.py [--runs 200] [--no-docker] [--many 1000]
       .venv/bin/python bench/env_bench.py --runner-ab OLD_RUNNER.py [MORE.py ...] [--runs 1000]
  (only the exec round trip: the floor, a local sandbox on this tree's runner and one on each OLD's,
  called in turn so that load from other processes falls on all three alike; e.g.
  `git show main:orchard_cli/env/local_runner.py > /tmp/old_runner.py`)
Docker parts need a running engine (scripts/start-dockerd.sh) and build the base image once.
The service with hundreds of clients: bench/sdk_compat.py --only-concurrent --num 200 (the SDK's
own bench_concurrent.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ORCHARD_HOME", tempfile.mkdtemp(prefix="orchard-bench-"))

from orchard_cli.env.models import ExecRequest, SandboxSpec  # noqa: E402

TRUE = ExecRequest(command=["true"], wait=True, timeout_seconds=30)


def timed(fn, runs: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def interleaved(fn, ref, runs: int, *more) -> tuple[list[float], ...]:
    """`fn`, `ref` (and `more`) timed in turn (ms), after one warm-up of each. A call may return
    a function, run untimed before the next call (the engine's work it left behind, so that it
    does not slow what is timed next)."""
    calls = (fn, ref, *more)
    for call in calls:
        settle = call()
        if callable(settle):
            settle()
    samples: tuple[list[float], ...] = tuple([] for _ in calls)
    for _ in range(runs):
        for call, out in zip(calls, samples):
            t = time.perf_counter()
            settle = call()
            out.append((time.perf_counter() - t) * 1000)
            if callable(settle):
                settle()
    return samples


def row(name: str, samples: list[float], floor: float | None = None, ref: float | None = None) -> str:
    med = statistics.median(samples)
    p90 = sorted(samples)[int(len(samples) * 0.9) - 1]
    extra = ""
    if floor is not None:
        extra += f"  +{med - floor:7.2f} ms over floor"
    if ref is not None:
        extra += f"  x{med / ref:5.2f} of ref"
    return f"  {name:<38} median {med:8.2f} ms  p90 {p90:8.2f} ms{extra}"


def bench_exec(runs: int, docker: bool) -> list[str]:
    from orchard_cli.env.manager import EnvManager

    lines = ["exec round trip of `true` (n=%d)" % runs]
    floor = timed(lambda: subprocess.run(["true"]), runs)
    f = statistics.median(floor)
    lines.append(row("floor: subprocess.run(['true'])", floor))
    with EnvManager("local") as env:
        sb = env.create_sandbox(SandboxSpec())
        lines.append(row("orchard local (in-process)",
                         timed(lambda: env.exec(sb.sandbox_id, TRUE), runs), floor=f))
    lines.append(_exec_over_http(runs, f))
    if docker:
        from orchard_cli.env.images import ensure_base_image

        image = ensure_base_image()
        with EnvManager("docker") as env:
            sb = env.create_sandbox(SandboxSpec(image=image))
            ours = timed(lambda: env.exec(sb.sandbox_id, TRUE), runs)
            name = sb.details.get("container_name") or sb.details.get("container_id") or f"orchard-{sb.sandbox_id}"
            raw_runs = max(20, runs // 5)
            raw = timed(lambda: subprocess.run(["docker", "exec", name, "true"], capture_output=True), raw_runs)
            r = statistics.median(raw)
            lines.append(row("orchard docker (in-process)", ours, floor=f, ref=r))
            lines.append(row(f"raw `docker exec` CLI (ref, n={raw_runs})", raw, floor=f))
    return lines


def bench_runner_ab(runs: int, olds: list[Path]) -> list[str]:
    """exec `true`: the floor, this tree's runner and each of `olds`, interleaved (one sandbox each)."""
    from orchard_cli.env import runner_boot
    from orchard_cli.env.manager import EnvManager

    current = runner_boot.SOURCE
    with EnvManager("local") as env:
        sandboxes = {}
        for name, source in [("this tree", current)] + [(old.name, old) for old in olds]:
            runner_boot.SOURCE = source
            runner_boot._by.cache_clear()
            sandboxes[name] = env.create_sandbox(SandboxSpec()).sandbox_id
        runner_boot.SOURCE = current
        runner_boot._by.cache_clear()
        calls = [lambda: subprocess.run(["true"])] + [
            (lambda sid=sid: env.exec(sid, TRUE)) for sid in sandboxes.values()]
        samples = interleaved(*calls[:2], runs, *calls[2:])
    floor = statistics.median(samples[0])
    lines = [f"exec round trip of `true`, interleaved (n={runs}, load {os.getloadavg()[0]:.2f})",
             row("floor: subprocess.run(['true'])", samples[0])]
    lines += [row(f"local, runner of {name}", got, floor=floor) for name, got in zip(sandboxes, samples[1:])]
    return lines


def _exec_over_http(runs: int, floor: float) -> str:
    from orchard_cli.env import daemon
    from orchard_cli.env.client import EnvClient

    state = daemon.start_detached("local", "127.0.0.1", 0)
    url = state.url if hasattr(state, "url") else state
    try:
        client = EnvClient(url)
        sb = client.create_sandbox(SandboxSpec())
        samples = timed(lambda: client.exec(sb.sandbox_id, TRUE), runs)
        client.delete_sandbox(sb.sandbox_id)
        return row("orchard local over HTTP (service)", samples, floor=floor)
    finally:
        daemon.stop()


def bench_lifecycle(runs: int, docker: bool) -> list[str]:
    from orchard_cli.env.manager import EnvManager

    lines = ["sandbox create -> ready -> destroy (n=%d)" % runs]

    def cycle(env, spec):
        info = env.create_sandbox(spec)
        env.delete_sandbox(info.sandbox_id)

    with EnvManager("local") as env:
        lines.append(row("orchard local", timed(lambda: cycle(env, SandboxSpec()), runs)))
    if docker:
        from orchard_cli.env.images import ensure_base_image

        image = ensure_base_image()
        n = max(10, runs // 2)

        def raw_run() -> None:
            subprocess.run(["docker", "run", "--rm", "--network", "none", image, "true"], capture_output=True,
                           check=True)

        with EnvManager("docker") as env:
            api = env.backend.api

            def removed(sandbox_id: str) -> None:
                import docker.errors

                try:
                    api.wait(f"orchard-{sandbox_id}", condition="removed")
                except docker.errors.NotFound:
                    pass

            def ours_cycle():  # destroy returns once nothing in the container runs
                info = env.create_sandbox(SandboxSpec(image=image))
                env.delete_sandbox(info.sandbox_id)
                return lambda: removed(info.sandbox_id)  # untimed: the engine's work done first

            def until_removed() -> None:
                info = env.create_sandbox(SandboxSpec(image=image))
                env.delete_sandbox(info.sandbox_id)
                removed(info.sandbox_id)

            # interleaved, one of each in turn: the engine's speed drifts by tens of ms over a
            # minute, and every side must see the same drift
            ours, raw, removed_samples = interleaved(ours_cycle, raw_run, n, until_removed)
            # and one after another with nothing settled between: each pays for the engine's
            # bookkeeping of the one before (total time / n)
            started = time.perf_counter()
            for _ in range(n):
                settle = ours_cycle()
            back_to_back = (time.perf_counter() - started) * 1000 / n
            settle()
        r = statistics.median(raw)
        lines.append(row(f"orchard docker (n={n})", ours, ref=r))
        lines.append(row("  ... and until the engine removed it", removed_samples, ref=r))
        lines.append(f"  {'  ... back to back (total / n)':<38} mean   {back_to_back:8.2f} ms"
                     f"{'':19}x{back_to_back / r:5.2f} of ref")
        lines.append(row(f"raw `docker run --rm` (ref, n={n})", raw))
    return lines


def _rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def _descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in kids.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


PUBLISHED_MANY_S = 26.0  # Orchard Env's published figure: 1,000 pods on an AKS cluster


def bench_many(n: int) -> list[str]:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from orchard_cli.env.manager import EnvManager

    lines = [f"{n} local sandboxes alive at once"]
    base_pss = _rss_kib([os.getpid(), *_descendants(os.getpid())])
    env = EnvManager("local")
    limit = env.open_files
    fds0, threads0 = len(os.listdir("/proc/self/fd")), threading.active_count()
    t = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        infos = list(pool.map(lambda _: env.create_sandbox(SandboxSpec(memory="256Mi")), range(n)))
    created = time.perf_counter() - t
    fds = sorted(int(x) for x in os.listdir("/proc/self/fd"))
    threads = threading.active_count() - threads0
    pss = _rss_kib([os.getpid(), *_descendants(os.getpid())]) - base_pss
    t = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        jobs = list(pool.map(lambda i: env.exec(i.sandbox_id, ExecRequest(
            command="echo $((6*7))", wait=True)), infos))
    ran = time.perf_counter() - t
    ok = sum(1 for j in jobs if j.ok and j.stdout.strip() == "42")
    alive = len(env.list_sandboxes())
    folder = Path(os.environ["ORCHARD_HOME"]) / "env" / "local"
    t = time.perf_counter()
    env.close()
    closed = time.perf_counter() - t
    time.sleep(0.5)
    left_dirs = [p for p in folder.iterdir()] if folder.exists() else []
    left_procs = _descendants(os.getpid())
    ids = {f"orchard-{i.sandbox_id}" for i in infos}
    left_cg = [root for ctl in ("memory", "pids", "cpu", "unified")
               for root, _dirs, _files in os.walk(f"/sys/fs/cgroup/{ctl}")
               if os.path.basename(root) in ids]
    lines += [
        f"  open files: soft {limit.before} -> {limit.soft} (hard {limit.hard}); highest descriptor {fds[-1]}",
        f"  created {n} in {created:6.2f} s ({created / n * 1000:.1f} ms each, 8 at a time); alive: {alive}"
        f"   published (1,000 pods, AKS): {PUBLISHED_MANY_S:.0f} s  x{created / PUBLISHED_MANY_S:.2f}",
        f"  each ran a command: {ok}/{n} ok in {ran:6.2f} s; create + run: {created + ran:6.2f} s",
        f"  per sandbox: {pss / max(n, 1) / 1024:.2f} MiB (PSS of runner + bwrap + this process's share), "
        f"{(len(fds) - fds0) / max(n, 1):.1f} descriptors, {threads / max(n, 1):.3f} threads",
        f"  destroyed all in {closed:6.2f} s; left behind: {len(left_dirs)} folders, "
        f"{len(left_procs)} processes, {len(left_cg)} cgroups",
    ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--many", type=int, default=100)
    parser.add_argument("--no-docker", action="store_true")
    parser.add_argument("--runner-ab", type=Path, nargs="+", metavar="OLD_RUNNER.py",
                        help="only compare the exec round trip with other local_runner.py files")
    args = parser.parse_args()
    if args.runner_ab:
        for old in args.runner_ab:
            if not old.is_file():
                print(f"error: no such file: {old}", file=sys.stderr)
                return 2
        print("\n".join(bench_runner_ab(args.runs, args.runner_ab)))
        return 0
    docker = not args.no_docker and shutil.which("docker") is not None and \
        subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    out = [f"orchard env benchmark  (python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
           f"docker {'on' if docker else 'off'})", ""]
    out += bench_exec(args.runs, docker) + [""]
    out += bench_lifecycle(max(20, args.runs // 4), docker) + [""]
    out += bench_many(args.many)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
