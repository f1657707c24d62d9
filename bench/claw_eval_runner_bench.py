"""Claw-Eval tasks through orchard and through Claw-Eval's own runner, side by side, on the same calls.

    python bench/claw_eval_bench.py PATH/TO/claw-eval --vs-runner --scripted DIR --runner-sandbox docker|none \\
        [--instances T086_...,...] [--reps 5] [--json OUT] [--keep-traces]

Every `<task_id>.json` in DIR is replayed (--instances picks some of them); a task that cannot run
on one side (orchard: needs_judge, needs_network, ...; the runner: an error) is listed with why,
and left out of the agreement and the times. Both sides are driven by ONE scripted
OpenAI-compatible endpoint (orchard_cli.models.scripted, served from this process) making the
same calls: the script's shell `commands` first, then its tool `calls`, then its `answer`:

  orchard  an episode of the task (`run_episode`) with orchard's `bash` harness: each command a
           `bash` tool call, each tool call a `bash` call of `task-tool NAME -` (the JSON arguments on
           stdin: only a task-tool call, so its grader sees the tool's dispatch, not a Bash call),
           forwarded by orchard's tool gateway to the task's mock service; services leased from
           the family's pool (started once per task, reset per episode), a bubblewrap sandbox per
           episode, the task's grader in the checkout's environment.
  runner   Claw-Eval's own batch worker, `claw_eval.cli._run_single_task` (what `claw-eval batch`
           runs per task), in the checkout's environment that orchard built, `--trials` reps+1,
           with its sandbox tools (each command a `Bash` call): services started once, reset
           between trials. --runner-sandbox (no default: say which) docker: a container of image
           claw-eval-agent:latest per trial (its `batch --sandbox`; build the image with
           bench/claw_eval_runner_image.sh); none: its local mode, the tools running in a fresh
           folder per trial holding the task's sandbox_files (its local mode takes no env snapshot,
           so a grader that reads one scores differently: such tasks are marked).

agree: orchard's Claw-Eval score and pass equal the runner's on every repetition (orchard's
strict verdict is its own column). Interleaved: each repetition runs one orchard episode, then one
runner trial (the runner's process waits between trials, inside its own reset, for this script's
go). Repetition 0 is the cold one (orchard: the service set started; runner: its trial 0, services
up reported beside it) and is reported apart; the medians are over repetitions 1..reps. The
runner's phases are timed by wrapping its own functions; orchard's by wrapping the family's hooks.
The runner's traces go to a temporary folder, removed at the end (--keep-traces keeps it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MARK = "@@RUNNER@@"
IMAGE = "claw-eval-agent:latest"
"""Claw-Eval's sandbox image (its config's default)."""

# Runs in the checkout's environment (its python, PYTHONPATH=src:.), never in orchard's process:
# Claw-Eval's batch worker with timers around its own functions, pausing before each trial.
DRIVER = r'''
import inspect, json, os, shutil, sys, tempfile, time
from pathlib import Path
import httpx
from claw_eval import cli
from claw_eval.runner import loop, services, sandbox_runner
from claw_eval.graders import registry
from claw_eval.trace import reader
from claw_eval.models.scoring import compute_task_score, is_pass
from claw_eval.models.task import TaskDefinition

spec = json.loads(sys.argv[1])
phases, last = {}, {}

def emit(event, **data):
    sys.stdout.write("\n" + MARK + json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()

def local_workspace():
    """none: the sandbox tools run in this process's folder: a fresh one per trial, with the task's
    sandbox_files where its own inject_files would put them (task folder, else the checkout root)."""
    if spec["sandbox"]:
        return
    task_dir, root = Path(spec["task_dir"]), Path(spec["root"])
    work = Path(tempfile.mkdtemp(prefix="ws-", dir=spec["trace_dir"]))
    task = TaskDefinition.from_yaml(task_dir / "task.yaml")
    for rel in list(task.sandbox_files) or list(task.environment.fixtures):
        source = task_dir / rel if (task_dir / rel).exists() else root / rel
        if source.is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, work / rel)
    os.chdir(work)

def pause():
    emit("ready", phases=dict(phases), score=dict(last))
    phases.clear(); last.clear()
    if sys.stdin.readline().strip() != "go":
        raise SystemExit(3)
    local_workspace()

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
                              0, True, None, spec["trials"], None, spec["sandbox"], None, True)
emit("result", result=result)
'''.replace("MARK", repr(MARK))


def replies(script: Any, side: str) -> list[dict[str, Any]]:
    """The endpoint's turns for one episode: each shell command, each tool call (native, or
    orchard's bash + task-tool), then the answer."""
    turns = []
    for command in script.commands:
        name = "Bash" if side == "runner" else "bash"
        turns.append({"tool_calls": [{"name": name, "arguments": {"command": command}}]})
    for call in script.tool_calls:
        if side == "runner":
            turns.append({"tool_calls": [{"name": call.tool, "arguments": call.arguments}]})
        else:
            body = json.dumps(call.arguments, ensure_ascii=False)
            command = f"task-tool {call.tool} - <<'ORCHARD_ARGS'\n{body}\nORCHARD_ARGS"
            turns.append({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]})
    return [*turns, {"content": script.answer or ""}]


class Runner:
    """Claw-Eval's batch worker for one task, in its own process, one trial per `trial()`."""

    def __init__(self, checkout: Any, task_dir: Path, base_url: str, trials: int, sandbox: bool, trace_dir: str) -> None:
        spec = {"task_dir": str(task_dir), "root": str(checkout.root), "base_url": base_url, "trials": trials,
                "sandbox": sandbox, "trace_dir": trace_dir}
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
        tail = " | ".join(line.strip() for line in Path(self.log.name).read_text(errors="replace").splitlines()[-4:])
        raise RuntimeError(f"Claw-Eval's runner ended early (rc={self.proc.wait()}): {tail[-600:]}")

    def trial(self) -> tuple[float, dict[str, Any]]:
        assert self.proc.stdin is not None
        started = time.perf_counter()
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        found = self.event("ready", "last")
        return time.perf_counter() - started, found

    def close(self) -> dict[str, Any]:
        try:
            result = self.event("result")["result"]
            self.proc.wait(timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            result = {"error": str(exc)}
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
        return result


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
        wrap(getattr(family, "legacy", family), name, phase)  # the version-1 hooks behind the seam's adapter
    wrap(services.ServiceSet, "audit", "audit")
    wrap(services.ServiceSet, "reset", "reset")


def vs_runner(checkout_path: str, scripts_dir: str | None, instances: list[str] | None, reps: int,
              json_out: str | None, runner_sandbox: str | None, keep_traces: bool = False) -> None:
    from claw_eval_bench import read_scripts
    from claw_eval_runner_report import report

    from orchard_cli.env import connect
    from orchard_cli.models.scripted import ScriptedEndpoint
    from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions
    from orchard_cli.families import load_suite

    if not scripts_dir:
        sys.exit("--vs-runner needs --scripted DIR (the call lists both sides replay)")
    if runner_sandbox not in ("docker", "none"):
        sys.exit("--vs-runner needs --runner-sandbox docker (its container per trial: claw-eval-agent:latest, "
                 "bench/claw_eval_runner_image.sh builds it) or none (its local mode)")
    if runner_sandbox == "docker" and subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        sys.exit(f"no Docker image {IMAGE} for Claw-Eval's sandbox: bench/claw_eval_runner_image.sh CHECKOUT builds "
                 "one, or --runner-sandbox none")
    scripts = read_scripts(Path(scripts_dir), instances)
    family, tasks = load_suite("claw-eval", dataset=checkout_path, instances=sorted(scripts))
    checkout = family.checkout(str(Path(checkout_path).expanduser().resolve()))
    skipped: dict[str, str] = {}
    runnable = []
    for task in tasks:
        blocked = family.blocker(task)
        if blocked:
            skipped[task.task_id] = f"orchard: {blocked[0]} ({blocked[1]})"
        else:
            runnable.append(task)
    times: dict[str, float] = {}
    timed_family(family, times)
    endpoint = ScriptedEndpoint(["unused"], dialects=("chat",))
    info = endpoint.start()
    solver = AgentSolver("bash", model="scripted", base_url=info.base_url,
                         options=EpisodeOptions(timeout_seconds=600, max_calls=128),
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
    print(f"# {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; runner sandbox: {runner_sandbox}; {reps} reps + "
          f"1 cold per task; {len(runnable)} of {len(scripts)} scripted tasks run here", file=sys.stderr)
    try:
        for task in runnable:
            try:
                rows += _one_task(task, scripts[task.task_id], family, checkout, env, endpoint, solver, info, times,
                                  reps, runner_sandbox, trace_root)
            except RuntimeError as exc:
                skipped[task.task_id] = f"runner: {exc}"
    finally:
        solver.close()
        endpoint.stop()
        family.close()
        env.close()
        if keep_traces:
            print(f"# the runner's traces and logs: {trace_root}", file=sys.stderr)
        else:
            shutil.rmtree(trace_root, ignore_errors=True)
    summary = report(rows, reps, runner_sandbox, skipped, {t.task_id: t.record["definition"] for t in runnable})
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"vs_runner": rows, "reps": reps, "runner_sandbox": runner_sandbox, "not_run": skipped,
                       "summary": summary, "load": os.getloadavg()}, f, indent=1)


def _one_task(task: Any, script: Any, family: Any, checkout: Any, env: Any, endpoint: Any, solver: Any, info: Any,
              times: dict[str, float], reps: int, runner_sandbox: str, trace_root: str) -> list[dict[str, Any]]:
    from orchard_cli.family import RunOptions
    from orchard_cli.rollout.episode import Episode, run_episode

    rows: list[dict[str, Any]] = []
    runner = Runner(checkout, checkout.root / "tasks" / task.record["folder"], info.base_url, reps + 1,
                    runner_sandbox == "docker", trace_root)
    services_up = runner.first["phases"].get("services up", 0.0)
    try:
        for rep in range(reps + 1):
            endpoint.replies, endpoint.served = _as_replies(replies(script, "orchard")), 0
            times.clear()
            started = time.perf_counter()
            result = run_episode(Episode(task=task, attempt=rep + 1, solver=solver,
                                         episode_id=f"vs-{task.task_id}-{rep}"), family=family, env=env,
                                 options=RunOptions())
            wall = time.perf_counter() - started
            tests = result.outcome.tests or {}
            rows.append({"task": task.task_id, "side": "orchard", "rep": rep, "seconds": wall, "phases": dict(times),
                         "category": result.outcome.category, "score": tests.get("score"),
                         "passed": tests.get("benchmark_passed"), "error": result.outcome.error,
                         "calls": len(script.tool_calls), "commands": len(script.commands)})
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
    finally:
        outcome = runner.close()
    errors = [t.get("error") for t in outcome.get("trials") or () if t.get("error")] + [outcome.get("error")]
    if any(errors):
        raise RuntimeError(next(e for e in errors if e)[:300])
    return rows


def _as_replies(items: list[dict[str, Any]]) -> list[Any]:
    from orchard_cli.models.scripted import ScriptedReply

    return [ScriptedReply.model_validate(i) for i in items]
