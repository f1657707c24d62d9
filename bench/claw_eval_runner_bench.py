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
DOCKER_ALLOWANCE_S = 0.7
"""What the runner's Docker mode adds per trial (its container up and down): the speed goal is
orchard's episode at most the runner's without a sandbox plus this."""

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
        wrap(family, name, phase)
    wrap(services.ServiceSet, "audit", "audit")
    wrap(services.ServiceSet, "reset", "reset")


def vs_runner(checkout_path: str, scripts_dir: str | None, instances: list[str] | None, reps: int,
              json_out: str | None, runner_sandbox: str | None, keep_traces: bool = False) -> None:
    from claw_eval_bench import read_scripts

    from orchard_cli.env import connect
    from orchard_cli.models.scripted import ScriptedEndpoint
    from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions
    from orchard_cli.tasks.registry import load_suite

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
                                         episode_id=f"vs-{task.task_id}-{rep}"), family=family, env=env, backend="local")
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


ORCHARD_SPLIT = ("services", "reset+files", "reset", "agent", "collect", "audit", "grade", "other")
"""reset is inside reset+files, audit inside collect; other = wall less the top-level phases."""
ORCHARD_TOP = ("services", "reset+files", "agent", "collect", "grade", "release")
RUNNER_SPLIT = ("reset", "container up", "files", "agent", "audit", "snapshot", "container down", "grade", "other")
RUNNER_TOP = RUNNER_SPLIT[:-1]


def report(rows: list[dict[str, Any]], reps: int, runner_sandbox: str, skipped: dict[str, str],
           definitions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    for row in rows:
        top = ORCHARD_TOP if row["side"] == "orchard" else RUNNER_TOP
        row["phases"]["other"] = row["seconds"] - sum(row["phases"].get(k, 0.0) for k in top)

    def med(task: str, side: str, key: str | None = None, warm: bool = True) -> float:
        found = [r for r in rows if r["task"] == task and r["side"] == side and (r["rep"] > 0) == warm]
        values = [r["seconds"] if key is None else r["phases"].get(key, 0.0) for r in found]
        return statistics.median(values) if values else float("nan")

    def verdicts(task: str, side: str) -> set[tuple[Any, Any]]:
        return {(r.get("score"), r.get("passed")) for r in rows if r["task"] == task and r["side"] == side}

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    print(f"\nper-episode wall, median of {reps} warm reps (s); cold = rep 0 (runner cold: services up + trial 0); "
          f"agree = the same Claw-Eval score and pass on every rep")
    print(f"{'task':40s} {'calls':>6s} {'orchard':>8s} {'runner':>8s} {'ratio':>6s} {'o cold':>7s} {'r cold':>7s} "
          f"{'o score/pass':>13s} {'r score/pass':>13s} {'agree':>5s} {'strict':>10s}")
    agree_count, per_task = 0, {}
    for task in tasks:
        o, r = med(task, "orchard"), med(task, "runner")
        oc = med(task, "orchard", warm=False)
        rc = med(task, "runner", warm=False) + med(task, "runner", "services up", warm=False)
        ov, rv = verdicts(task, "orchard"), verdicts(task, "runner")
        agree = len(ov) == 1 and ov == rv
        agree_count += agree
        first = next(x for x in rows if x["task"] == task and x["side"] == "orchard")
        calls = f"{first['calls']}" + (f"+{first['commands']}sh" if first["commands"] else "")
        mark = ""
        if runner_sandbox == "none" and not agree and _reads_snapshot(definitions.get(task) or {}):
            mark = "  (its grader reads the env snapshot, which the runner's local mode does not take)"
        print(f"{task:40s} {calls:>6s} {o:8.2f} {r:8.2f} {o / r:6.2f} {oc:7.2f} {rc:7.2f} {_v(ov):>13s} {_v(rv):>13s} "
              f"{'yes' if agree else 'NO':>5s} {first['category']:>10s}{mark}")
        per_task[task] = {"orchard": o, "runner": r, "agree": agree, "strict": first["category"]}
    summary: dict[str, Any] = {"tasks": len(tasks), "agree": agree_count, "not_run": len(skipped)}
    if tasks:
        mo = statistics.median(v["orchard"] for v in per_task.values())
        mr = statistics.median(v["runner"] for v in per_task.values())
        summary.update(orchard_median=mo, runner_median=mr, per_task=per_task)
        print(f"{'median over tasks':40s} {'':>6s} {mo:8.2f} {mr:8.2f} {mo / mr:6.2f}")
        print(f"\nagree: {agree_count}/{len(tasks)} tasks that ran on both sides")
        if runner_sandbox == "none":
            goal = mr + DOCKER_ALLOWANCE_S
            met = sum(v["orchard"] <= v["runner"] + DOCKER_ALLOWANCE_S for v in per_task.values())
            summary.update(goal_s=goal, goal_met=mo <= goal, tasks_within_goal=met)
            print(f"speed goal (orchard <= the runner without a sandbox + {DOCKER_ALLOWANCE_S} s, its Docker mode's cost "
                  f"per trial): median {mo:.2f} s vs {goal:.2f} s: {'met' if mo <= goal else 'NOT met'}; "
                  f"{met}/{len(tasks)} tasks within it")
    if skipped:
        print(f"\nnot run ({len(skipped)}; not counted):")
        for task, why in sorted(skipped.items()):
            print(f"  {task}: {why}")
    for side, split in (("orchard", ORCHARD_SPLIT), ("runner", RUNNER_SPLIT)):
        print(f"\n{side} split, warm medians (ms)")
        print(f"{'task':40s} " + " ".join(f"{k[:12]:>12s}" for k in split))
        for task in tasks:
            print(f"{task:40s} " + " ".join(f"{1000 * med(task, side, k):12.0f}" for k in split))
    print("\norchard: services = sandbox_spec (the lease: the task's services started when cold); reset+files = "
          "setup (the set's reset, the workspace files); agent = the bash harness run (model calls through "
          "orchard's recording proxy, each task-tool call answered by the agent's helper through the tool "
          "gateway); collect = tools closed, /audit, snapshot, messages rebuilt; grade = the task's grader in a "
          "helper process in the checkout's env; other = sandbox create/destroy, baseline, logs.")
    print(f"runner ({runner_sandbox}): reset = reset_all; agent = run_task less its /audit GETs; snapshot = grader "
          "files, env snapshot, saving it; grade = load_trace + get_grader + grade (in process); other = trace "
          "bookkeeping, local grader files.")
    return summary


def _v(found: set[tuple[Any, Any]]) -> str:
    if len(found) != 1:
        return "varies"
    score, passed = next(iter(found))
    return f"{score}/{'pass' if passed else 'fail'}"


def _reads_snapshot(definition: dict[str, Any]) -> bool:
    return bool(definition.get("env_snapshot_files") or definition.get("env_snapshot_commands")
                or definition.get("sandbox_grader_files"))
