"""Per-episode time of a Claw-Eval task: orchard against Claw-Eval's own runner, side by side.

    python bench/claw_eval_bench.py PATH/TO/claw-eval --vs-runner --scripted DIR \\
        [--instances T086_pinbench_calendar_event_creation,...] [--reps 5] [--runner-sandbox docker|none]

Both sides are driven by ONE scripted OpenAI-compatible endpoint (orchard_cli.models.scripted,
served from this process) making the same task-tool calls, then the same final answer, taken
from DIR/<task_id>.json (the --scripted files):

  orchard  an episode of the task (`run_episode`) with orchard's `bash` harness: the endpoint
           answers with `bash` tool calls running `task-tool NAME -` (the JSON arguments on
           stdin), each forwarded by orchard's tool gateway to the task's mock service; services
           leased from the family's pool (started once per task, reset per episode), a bubblewrap
           sandbox per episode, the task's grader in the checkout's environment.
  runner   Claw-Eval's own batch worker, `claw_eval.cli._run_single_task` (what `claw-eval batch`
           runs per task), in the checkout's environment that orchard built, with `--trials`
           reps+1: services started once, reset between trials; with --runner-sandbox docker (its
           README's `batch --sandbox`) a container of image claw-eval-agent:latest per trial; with
           none, its local mode (no container: no workspace files, no env snapshot). The endpoint
           answers with native tool calls of the task's tools.

The image: `claw-eval build-image` in the checkout (its Dockerfile.agent: python:3.11-slim, ffmpeg
and poppler from apt, requirements-sandbox-server.txt, playwright's chromium, the sandbox server).
Where apt and chromium cannot be fetched, the same image less those (enough for tasks whose tools
are HTTP services): python 3.11 + `pip install -r requirements-sandbox-server.txt`, the checkout's
src/claw_eval/sandbox/ copied to /opt/sandbox/, ENTRYPOINT python /opt/sandbox/server.py --port 8080.

Interleaved: each repetition runs one orchard episode, then one runner trial (the runner's process
waits between trials, inside its own reset, for this script's go). Repetition 0 is the cold one
(orchard: the service set started; runner: its trial 0, services up reported beside it) and is
reported apart; the medians are over repetitions 1..reps. The runner's phases are timed by
wrapping its own functions (ServiceManager, SandboxRunner, run_task, the /audit GETs, the env
snapshot, load_trace/get_grader/grade); orchard's by wrapping the family's hooks.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MARK = "@@RUNNER@@"
IMAGE = "claw-eval-agent:latest"
"""Claw-Eval's sandbox image (its config's default)."""
DEFAULT_TASKS = ("T086_pinbench_calendar_event_creation", "T099_pinbench_second_brain_recall",
                 "T044_service_outage_research", "T042_scheduled_task_management", "T040_onboarding_coordinator")

# Runs in the checkout's environment (its python, PYTHONPATH=src:.), never in orchard's process:
# Claw-Eval's batch worker with timers around its own functions, pausing before each trial.
DRIVER = r'''
import inspect, json, sys, time
import httpx
from claw_eval import cli
from claw_eval.runner import loop, services, sandbox_runner
from claw_eval.graders import registry
from claw_eval.trace import reader
from claw_eval.models.scoring import compute_task_score, is_pass

spec = json.loads(sys.argv[1])
phases, last = {}, {}

def emit(event, **data):
    sys.stdout.write("\n" + MARK + json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()

def pause():
    emit("ready", phases=dict(phases), score=dict(last))
    phases.clear(); last.clear()
    if sys.stdin.readline().strip() != "go":
        raise SystemExit(3)

def timed(owner, name, phase, before=None, after=None):
    real = getattr(owner, name)
    def wrapper(*args, **kwargs):
        if before:
            before()
        started = time.perf_counter()
        try:
            value = real(*args, **kwargs)
        finally:
            phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - started
        if after:
            after(value)
        return value
    static = isinstance(inspect.getattr_static(owner, name), staticmethod)
    setattr(owner, name, staticmethod(wrapper) if static else wrapper)

def graded(value):
    scores = value[0]
    score = compute_task_score(scores)
    last.update(score=round(score, 4), passed=bool(is_pass(score)), completion=scores.completion)

real_get = httpx.get
def get(url, *args, **kwargs):
    started = time.perf_counter()
    try:
        return real_get(url, *args, **kwargs)
    finally:
        if str(url).endswith("/audit"):
            phases["audit"] = phases.get("audit", 0.0) + time.perf_counter() - started
httpx.get = get

SM = services.ServiceManager
timed(SM, "__enter__", "services up", after=lambda _: pause())
timed(SM, "reset_all", "reset", before=pause)
timed(SM, "__exit__", "services down", before=lambda: emit("last", phases=dict(phases), score=dict(last)))
SR = sandbox_runner.SandboxRunner
timed(SR, "start_container", "container up")
timed(SR, "inject_files", "files")
timed(SR, "inject_grader_files", "snapshot")
timed(SR, "stop_container", "container down")
timed(cli, "_collect_env_snapshot", "snapshot")
timed(cli, "_save_env_snapshot", "snapshot")
timed(loop, "run_task", "agent")
timed(reader, "load_trace", "grade")
timed(registry, "get_grader", "grade")
timed(cli, "_grade_with_optional_params", "grade", after=graded)

result = cli._run_single_task(spec["task_dir"], None, "scripted", "scripted", spec["base_url"], spec["trace_dir"],
                              0, True, None, spec["trials"], None, spec["sandbox"], None, False)
emit("result", result=result)
'''.replace("MARK", repr(MARK))


def replies(script: Any, harness: str) -> list[dict[str, Any]]:
    """The endpoint's turns for one episode: each call (native, or orchard's bash + task-tool), then
    the answer."""
    turns = []
    for call in script.tool_calls:
        if harness == "runner":
            turns.append({"tool_calls": [{"name": call.tool, "arguments": call.arguments}]})
        else:
            body = json.dumps(call.arguments, ensure_ascii=False)
            command = f"task-tool {call.tool} - <<'ORCHARD_ARGS'\n{body}\nORCHARD_ARGS"
            turns.append({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]})
    return [*turns, {"content": script.answer or ""}]


class Runner:
    """Claw-Eval's batch worker for one task, in its own process, one trial per `trial()`."""

    def __init__(self, checkout: Any, task_dir: Path, base_url: str, trials: int, sandbox: bool, trace_dir: str) -> None:
        spec = {"task_dir": str(task_dir), "base_url": base_url, "trials": trials, "sandbox": sandbox,
                "trace_dir": trace_dir}
        self.driver = Path(trace_dir) / "driver.py"
        self.driver.write_text(DRIVER, encoding="utf-8")
        self.log = open(Path(trace_dir) / f"{task_dir.name}.log", "w")
        self.proc = subprocess.Popen([checkout.python(), str(self.driver), json.dumps(spec)], cwd=checkout.root,
                                     env=checkout.environ(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.first = self.event("ready")  # services up, waiting for the first trial

    def event(self, *kinds: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                found = json.loads(line[len(MARK):])
                if found["event"] in kinds:
                    return found
            else:
                self.log.write(line)
        self.log.flush()
        raise RuntimeError(f"Claw-Eval's runner ended early (rc={self.proc.wait()}); its output: {self.log.name}")

    def trial(self) -> tuple[float, dict[str, Any]]:
        assert self.proc.stdin is not None
        started = time.perf_counter()
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        found = self.event("ready", "last")
        return time.perf_counter() - started, found

    def close(self) -> dict[str, Any]:
        result = self.event("result")
        self.proc.wait(timeout=60)
        self.log.close()
        return result["result"]


def timed_family(family: Any, times: dict[str, float]) -> None:
    """Wrap the family's hooks on this instance (and the service set's reset and audit) with timers
    adding to `times` (reset by the caller per episode)."""
    from orchard_cli.tasks.claw_eval import services

    def wrap(owner: Any, name: str, phase: str) -> None:
        real = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                times[phase] = times.get(phase, 0.0) + time.perf_counter() - started
        setattr(owner, name, wrapper)

    for name, phase in (("sandbox_spec", "services"), ("setup", "reset+files"), ("collect", "collect"),
                        ("grade", "grade"), ("release", "release")):
        wrap(family, name, phase)
    wrap(services.ServiceSet, "audit", "audit")
    wrap(services.ServiceSet, "reset", "reset")


def vs_runner(checkout_path: str, scripts_dir: str | None, instances: list[str] | None, reps: int,
              json_out: str | None, runner_sandbox: str = "docker") -> None:
    from claw_eval_bench import read_script

    from orchard_cli.env import connect
    from orchard_cli.models.scripted import ScriptedEndpoint
    from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions
    from orchard_cli.rollout.episode import Episode, run_episode
    from orchard_cli.tasks.registry import load_suite

    if not scripts_dir:
        sys.exit("--vs-runner needs --scripted DIR (the call lists both sides replay)")
    wanted = instances or list(DEFAULT_TASKS)
    scripts = {t: read_script(Path(scripts_dir) / f"{t}.json") for t in wanted}
    if any(s.commands for s in scripts.values()):
        sys.exit("--vs-runner replays tool calls only: leave out tasks whose script has commands")
    if runner_sandbox == "docker" and subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        sys.exit(f"no Docker image {IMAGE} for Claw-Eval's sandbox: build it (bench/claw_eval_runner_bench.py's "
                 "docstring says how), or --runner-sandbox none")
    family, tasks = load_suite("claw-eval", dataset=checkout_path, instances=wanted)
    checkout = family.checkout(str(Path(checkout_path).expanduser().resolve()))
    times: dict[str, float] = {}
    timed_family(family, times)
    endpoint = ScriptedEndpoint(["unused"], dialects=("chat",))
    info = endpoint.start()
    solver = AgentSolver("bash", model="scripted", base_url=info.base_url,
                         options=EpisodeOptions(timeout_seconds=600, max_calls=64),
                         proxy_options={"upstream_dialects": ["chat"]})
    real_solve = solver.solve

    def solve(context: Any) -> Any:
        started = time.perf_counter()
        try:
            return real_solve(context)
        finally:
            times["agent"] = times.get("agent", 0.0) + time.perf_counter() - started
    solver.solve = solve  # type: ignore[method-assign]
    env = connect("local")
    rows: list[dict[str, Any]] = []
    trace_root = tempfile.mkdtemp(prefix="ce-runner-")
    print(f"# {os.cpu_count()} cores; runner sandbox: {runner_sandbox}; {reps} reps + 1 cold per task; traces and "
          f"runner logs in {trace_root}", file=sys.stderr)
    try:
        for task in tasks:
            script = scripts[task.task_id]
            runner = Runner(checkout, checkout.root / "tasks" / task.record["folder"], info.base_url, reps + 1,
                            runner_sandbox == "docker", trace_root)
            services_up = runner.first["phases"].get("services up", 0.0)
            for rep in range(reps + 1):
                endpoint.replies, endpoint.served = _as_replies(replies(script, "bash")), 0
                times.clear()
                started = time.perf_counter()
                result = run_episode(Episode(task=task, attempt=rep + 1, solver=solver,
                                             episode_id=f"vs-{task.task_id}-{rep}"), family=family, env=env, backend="local")
                wall = time.perf_counter() - started
                tests = result.outcome.tests or {}
                rows.append({"task": task.task_id, "side": "orchard", "rep": rep, "seconds": wall, "phases": dict(times),
                             "category": result.outcome.category, "score": tests.get("score"),
                             "passed": tests.get("benchmark_passed"), "error": result.outcome.error})
                endpoint.replies, endpoint.served = _as_replies(replies(script, "runner")), 0
                wall, found = runner.trial()
                phases = dict(found["phases"])
                phases["agent"] = phases.get("agent", 0.0) - phases.get("audit", 0.0)  # run_task fetches /audit
                if rep == 0:
                    phases["services up"] = services_up
                rows.append({"task": task.task_id, "side": "runner", "rep": rep, "seconds": wall, "phases": phases,
                             **found["score"]})
                print(f"{task.task_id:40s} rep {rep}: orchard {rows[-2]['seconds']:6.2f}s {rows[-2]['category']:11s} "
                      f"score={rows[-2]['score']}  runner {wall:6.2f}s score={found['score'].get('score')}",
                      file=sys.stderr, flush=True)
            outcome = runner.close()
            if outcome.get("error"):
                print(f"  runner error: {outcome['error']}", file=sys.stderr)
    finally:
        solver.close()
        endpoint.stop()
        family.close()
        env.close()
    report(rows, reps, runner_sandbox)
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"vs_runner": rows, "reps": reps, "runner_sandbox": runner_sandbox}, f, indent=1)


def _as_replies(items: list[dict[str, Any]]) -> list[Any]:
    from orchard_cli.models.scripted import ScriptedReply

    return [ScriptedReply.model_validate(i) for i in items]


ORCHARD_SPLIT = ("services", "reset+files", "reset", "agent", "collect", "audit", "grade", "other")
"""reset is inside reset+files, audit inside collect; other = wall less the top-level phases."""
ORCHARD_TOP = ("services", "reset+files", "agent", "collect", "grade", "release")
RUNNER_SPLIT = ("reset", "container up", "files", "agent", "audit", "snapshot", "container down", "grade", "other")
RUNNER_TOP = RUNNER_SPLIT[:-1]


def report(rows: list[dict[str, Any]], reps: int, runner_sandbox: str) -> None:
    for row in rows:
        top = ORCHARD_TOP if row["side"] == "orchard" else RUNNER_TOP
        row["phases"]["other"] = row["seconds"] - sum(row["phases"].get(k, 0.0) for k in top)

    def med(task: str, side: str, key: str | None = None, warm: bool = True) -> float:
        found = [r for r in rows if r["task"] == task and r["side"] == side and (r["rep"] > 0) == warm]
        values = [r["seconds"] if key is None else r["phases"].get(key, 0.0) for r in found]
        return statistics.median(values) if values else float("nan")

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    print(f"\nper-episode wall, median of {reps} warm reps (s); cold = rep 0 (runner cold: services up + trial 0)")
    print(f"{'task':40s} {'orchard':>8s} {'runner':>8s} {'ratio':>6s} {'o cold':>7s} {'r cold':>7s}  verdicts")
    for task in tasks:
        o, r = med(task, "orchard"), med(task, "runner")
        oc = med(task, "orchard", warm=False)
        rc = med(task, "runner", warm=False) + med(task, "runner", "services up", warm=False)
        verdicts = sorted({(x["side"], x.get("score"), x.get("passed")) for x in rows if x["task"] == task}, key=str)
        print(f"{task:40s} {o:8.2f} {r:8.2f} {o / r:6.2f} {oc:7.2f} {rc:7.2f}  "
              + "; ".join(f"{s} {sc}/{p}" for s, sc, p in verdicts))
    for side, split in (("orchard", ORCHARD_SPLIT), ("runner", RUNNER_SPLIT)):
        print(f"\n{side} split, warm medians (ms)")
        print(f"{'task':40s} " + " ".join(f"{k[:12]:>12s}" for k in split))
        for task in tasks:
            print(f"{task:40s} " + " ".join(f"{1000 * med(task, side, k):12.0f}" for k in split))
    print("\norchard: services = sandbox_spec (the lease: the task's services started when cold); reset+files = "
          "setup (the set's reset, the workspace files); agent = the bash harness run (model calls through "
          "orchard's recording proxy, each task-tool call a process in the sandbox, through the tool gateway); "
          "collect = tools closed, /audit, snapshot, messages rebuilt; grade = the task's grader in a helper "
          "process in the checkout's env; other = sandbox create/destroy, baseline, logs.")
    print(f"runner ({runner_sandbox}): reset = reset_all; agent = run_task less its /audit GETs; snapshot = grader "
          "files, env snapshot, saving it; grade = load_trace + get_grader + grade (in process); other = trace "
          "bookkeeping, local grader files.")
