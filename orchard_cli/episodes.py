"""One episode: a harness drives a model on one task, its model calls recorded by the proxy.

    open a proxy episode (its own token and caps)
    create the task's sandbox with network='proxy' and the harness's mounts; family.setup
    harness.run(sandbox, context)           # base_url = the proxy as the sandbox sees it
    patch = git diff of the working tree    # against a snapshot taken right after setup
    close the episode; grade the patch in a FRESH sandbox; build the Trajectory

`orchard distill` runs `run_episode`; `orchard eval --harness` runs the same phases through the
eval loop (`HarnessSource` in `agent_source.py`), which grades in its own fresh sandbox.

Verdicts are never 'unresolved' when the model could not be reached: a patch that does not
resolve the task is `infra_error` when upstream calls failed (or the harness could not run) and
`timeout` when the harness ran past its limit. This module is the one place (with the eval loop)
that pairs tasks with harnesses; the env, the proxy and the records never import it.
"""

from __future__ import annotations

import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli import __version__
from orchard_cli.conversation import conversation
from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.attempts import Attempt
from orchard_cli.evaluation import _Failed, _phase, settle
from orchard_cli.harnesses.base import Harness, HarnessContext, HarnessRun
from orchard_cli.proxy.records import CallError, CallRecord, EpisodeSummary
from orchard_cli.tasks.base import ERROR_CATEGORIES, Outcome, Task
from orchard_cli.trajectory import Trajectory, TrajectoryOutcome, episode_key

HARNESS_GRACE_SECONDS = 60.0  # beyond its own limit, how long a harness may take to return
CALL_GRACE_SECONDS = 10.0  # how long a model call in flight when the harness ends may take to finish
PATCH_FILE = "/tmp/orchard-episode.diff"
INFRA_STATUSES = frozenset({401, 403, 404, 408, 429})


class Price(BaseModel):
    """USD per million tokens; a model without a known price has no cost (None, never 0)."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return round((tokens_in * self.input_per_mtok + tokens_out * self.output_per_mtok) / 1e6, 6)


class EpisodeOptions(BaseModel):
    """Limits of one episode."""

    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float = Field(1800.0, gt=0)
    """Wall-clock limit of the harness run."""
    max_turns: int = Field(50, ge=1)
    """Passed to the harness (its own turn limit, where it has one)."""
    max_calls: int | None = Field(100, ge=1)
    """Cap on model calls per episode, enforced by the proxy (harnesses can loop)."""
    max_tokens: int | None = Field(None, ge=1)
    """Cap on total tokens per episode, enforced by the proxy."""
    price: Price | None = None


@dataclass
class AgentResult:
    """What the harness left behind in its sandbox, and how it got there."""

    run: HarnessRun
    patch: str = ""
    records: list[CallRecord] = field(default_factory=list)
    summary: EpisodeSummary | None = None
    errors: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    duration_seconds: float = 0.0

    @property
    def tokens(self) -> tuple[int, int]:
        used = [r.usage for r in self.records if r.usage is not None]
        return sum(u.input_tokens for u in used), sum(u.output_tokens for u in used)

    def failure(self) -> tuple[str, str] | None:
        """(category, reason) an unresolved patch counts as, when the model is not to blame."""
        if self.run.timed_out:
            return "timeout", self.run.error or "the harness ran past its time limit"
        bad = [r.error for r in self.records if r.error is not None and is_infra(r.error)]
        if bad:
            return "infra_error", f"{len(bad)} model call(s) failed upstream; first: {bad[0].message}"
        reached = any(r.error is None and r.status == 200 for r in self.records)
        if not reached and (self.run.error or self.run.exit_code not in (0, None)):
            why = self.run.error or f"exit code {self.run.exit_code}: {_last_line(self.run.stderr_tail)}"
            return "infra_error", f"the harness never reached the model ({why})"
        return None


def is_infra(error: CallError) -> bool:
    """Upstream unreachable, 5xx, auth or rate limits, untranslatable: not the model's fault."""
    if error.type in ("infra", "translation"):
        return True
    return (error.type == "upstream" and (error.status or 0) >= 500) or error.status in INFRA_STATUSES


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# ---- the sandbox, the prompt, the harness -------------------------------------------------------


def agent_spec(spec: SandboxSpec, harness: Harness, proxy_url: str) -> SandboxSpec:
    """The task's sandbox for an agent: only the proxy reachable, the harness's files bound in."""
    extra = harness.mounts()
    _mount_points(spec.mounts, extra)
    data = spec.model_dump()
    data.update(network="proxy", block_network=True, proxy_url=proxy_url,
                mounts=[*data["mounts"], *(m.model_dump() for m in extra)])
    return SandboxSpec.model_validate(data)


def _mount_points(mounts: list[Any], extra: list[Any]) -> None:
    """A harness bound below a task's read-only host folder (e.g. /opt/orchard/... below a task's
    /opt) needs its mount point to exist in that folder: a bind target cannot be created in a
    read-only bind. Make the (empty) folders there, on the host."""
    for mount in extra:
        target = mount.target.rstrip("/")
        parents = [m for m in mounts if target.startswith(m.target.rstrip("/") + "/")]
        if not parents:
            continue
        parent = max(parents, key=lambda m: len(m.target))
        source = Path(parent.source)
        if source.is_dir():
            (source / target[len(parent.target.rstrip("/")) + 1:]).mkdir(parents=True, exist_ok=True)


def build_prompt(family: Any, task: Task, workdir: str) -> str:
    """The task as a user would give it (a family may word it itself with `prompt(task, workdir)`)."""
    hook = getattr(family, "prompt", None)
    if callable(hook):
        return hook(task, workdir)
    repo = f" ({task.repo})" if task.repo else ""
    return (f"The git repository{repo} is checked out at {workdir}; that is your working "
            f"directory.\n\n<issue>\n{task.problem_statement.strip()}\n</issue>\n\n"
            f"Resolve the issue by editing the source files in {workdir}. Your fix is taken from "
            "the working tree as it is when you stop, so do not commit it, and do not modify or "
            "add tests: hidden tests will check the fix. When the fix is in place, stop and say "
            "briefly what you changed.")


def _exec(sandbox: SandboxHandle, command: str, timeout: float = 120.0) -> str:
    job = sandbox.exec(command, timeout=timeout)
    if not job.ok:
        raise RuntimeError(_last_line(job.stderr) or job.error or f"{job.status}, exit {job.exit_code}")
    return job.stdout


def snapshot(sandbox: SandboxHandle) -> str:
    """The working tree right after setup (untracked files included) as a git tree id."""
    return _exec(sandbox, "git add -A >/dev/null && git write-tree && git reset -q").strip()


def workspace_patch(sandbox: SandboxHandle, base: str, exclude: list[str] | tuple[str, ...] = ()) -> str:
    """What changed in the working tree since `base`, as a git diff (files the harness wrote for
    itself, `exclude` pathspecs, left out). Read through a file: output limits never cut it."""
    specs = " ".join(shlex.quote(f":(exclude){p}") for p in exclude)
    _exec(sandbox, f"git add -A >/dev/null && git diff --cached --no-color --no-ext-diff "
                   f"{shlex.quote(base)} -- . {specs} > {PATCH_FILE}; status=$?; git reset -q; exit $status")
    return sandbox.read_file(PATCH_FILE).decode("utf-8", "replace")


def sandbox_base_url(sandbox: SandboxHandle, episode_url: str) -> str:
    """The episode's URL as the sandbox reaches it: its ORCHARD_PROXY_URL plus the episode path."""
    from urllib.parse import urlsplit

    inside = _exec(sandbox, 'printf %s "$ORCHARD_PROXY_URL"', timeout=30).strip().rstrip("/")
    if not inside:
        raise RuntimeError("the sandbox has no ORCHARD_PROXY_URL (was it created with network='proxy'?)")
    return inside + urlsplit(episode_url).path


def run_harness(harness: Harness, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
    """harness.run with a watchdog: a harness that does not return in time counts as timed out
    (the caller destroys the sandbox, which ends whatever it left running)."""
    box: list[HarnessRun] = []
    started = time.monotonic()

    def target() -> None:
        try:
            box.append(harness.run(sandbox, context))
        except Exception as exc:  # the protocol says never raise; a bug must not kill the run
            box.append(HarnessRun(exit_code=None, error=f"the harness crashed: {type(exc).__name__}: {exc}",
                                  duration_seconds=round(time.monotonic() - started, 3)))

    thread = threading.Thread(target=target, name=f"orchard-harness-{harness.name}", daemon=True)
    thread.start()
    thread.join(context.timeout_seconds + HARNESS_GRACE_SECONDS)
    if box:
        return box[0]
    return HarnessRun(exit_code=None, timed_out=True, duration_seconds=round(time.monotonic() - started, 3),
                      error=f"the harness did not return within {context.timeout_seconds:g} s")


def run_agent(harness: Harness, sandbox: SandboxHandle, family: Any, task: Task, episode: Any, *,
              model: str, options: EpisodeOptions, stopping: threading.Event | None = None) -> AgentResult:
    """In a sandbox set up for the task: run the harness, take the patch, close the episode."""
    started = time.time()
    result = AgentResult(run=HarnessRun(exit_code=None), started_at=started)
    try:
        base = snapshot(sandbox)
        context = HarnessContext(prompt=build_prompt(family, task, sandbox.workdir), model=model,
                                 base_url=sandbox_base_url(sandbox, episode.base_url),
                                 api_key=episode.api_key, timeout_seconds=options.timeout_seconds,
                                 max_turns=options.max_turns)
    except Exception as exc:
        result.run = HarnessRun(exit_code=None, error=f"preparing the workspace failed: {exc}")
        result.errors.append(result.run.error or "")
    else:
        result.run = run_harness(harness, sandbox, context)
        if result.run.error:
            result.errors.append(f"harness: {result.run.error}")
        elif result.run.exit_code not in (0, None):
            result.errors.append(f"harness exited with code {result.run.exit_code}: "
                                 f"{_last_line(result.run.stderr_tail)}")
        if result.run.timed_out and not result.run.error:
            result.errors.append(f"harness: ran past {options.timeout_seconds:g} s")
        try:
            result.patch = workspace_patch(sandbox, base, getattr(harness, "scratch_paths", ()))
        except Exception as exc:
            result.errors.append(f"reading the patch failed: {exc}")
    # A call still in flight once the harness has ended is a stuck one: give it a moment, no more.
    result.summary = episode.close(timeout=1.0 if stopping is not None and stopping.is_set() else CALL_GRACE_SECONDS)
    result.records = episode.records
    if result.summary.capped:
        result.errors.append(f"capped: {result.summary.capped}")
    failed = [r.error for r in result.records if r.error is not None and r.error.type != "capped"]
    if failed:
        result.errors.append(f"{len(failed)} model call(s) failed; first: {failed[0].message}")
    result.duration_seconds = round(time.time() - started, 3)
    return result


def failure_info(agent: AgentResult | None) -> dict[str, Any]:
    """`Attempt.info` saying what an unresolved patch counts as (see `evaluation.settle`)."""
    failure = agent.failure() if agent is not None else None
    return {"failure": {"category": failure[0], "error": failure[1]}} if failure else {}


# ---- the trajectory -----------------------------------------------------------------------------


def trajectory(task: Task, harness: Harness, model: str, attempt: int, agent: AgentResult | None,
               outcome: Outcome, *, options: EpisodeOptions, harness_version: str | None,
               metadata: dict[str, Any] | None = None) -> Trajectory:
    records = agent.records if agent else []
    messages, tools = conversation(records)
    tokens_in, tokens_out = agent.tokens if agent else (0, 0)
    cost = options.price.cost(tokens_in, tokens_out) if options.price else None
    details: dict[str, Any] = dict(outcome.tests)
    if outcome.error:
        details["error"] = outcome.error
    meta: dict[str, Any] = {"repo": task.repo, "orchard_version": __version__, **(metadata or {})}
    if agent is not None:
        meta["harness_run"] = agent.run.model_dump(exclude={"stdout_tail", "stderr_tail"})
        if agent.summary is not None:
            meta["proxy"] = agent.summary.model_dump(exclude={"schema_version"})
    errors = list(agent.errors if agent else [])
    failure = agent.failure() if agent else None
    said = failure is not None and outcome.error == failure[1]  # the agent's errors say it already
    if outcome.category in ERROR_CATEGORIES and outcome.error and not said and outcome.error not in errors:
        errors.append(outcome.error)
    return Trajectory(
        episode_id=episode_key(task.suite, task.task_id, harness.name, model, attempt),
        task_id=task.task_id, suite=task.suite, family=task.family, harness=harness.name,
        harness_version=harness_version, model=model, attempt=attempt,
        problem_statement=task.problem_statement, calls=records, messages=messages, tools=tools,
        outcome=TrajectoryOutcome(resolved=outcome.resolved, category=outcome.category,
                                  reward=outcome.reward, details=details),
        patch=agent.patch if agent else "", started_at=agent.started_at if agent else time.time(),
        duration_seconds=agent.duration_seconds if agent else 0.0, tokens_in=tokens_in,
        tokens_out=tokens_out, cost_usd=cost,
        harness_exit_code=agent.run.exit_code if agent else None, errors=errors, metadata=meta)


def write_logs(log_dir: Path | None, agent: AgentResult | None, outcome: Outcome) -> None:
    """The harness's output tails, the patch and the test output, for a person to read."""
    if log_dir is None:
        return
    log_dir.mkdir(parents=True, exist_ok=True)
    if agent is not None:
        (log_dir / "harness.stdout.txt").write_text(agent.run.stdout_tail, encoding="utf-8")
        (log_dir / "harness.stderr.txt").write_text(agent.run.stderr_tail, encoding="utf-8")
        (log_dir / "patch.diff").write_text(agent.patch, encoding="utf-8")
    if outcome.log:
        (log_dir / "test_output.txt").write_text(outcome.log, encoding="utf-8")
    if outcome.error:
        (log_dir / "error.txt").write_text(outcome.error + "\n", encoding="utf-8")


# ---- one whole episode --------------------------------------------------------------------------


class EpisodeRunner:
    """Runs episodes of one harness + model through one proxy, on one Env. Thread-safe."""

    def __init__(self, env: Any, family: Any, harness: Harness, proxy: Any, *, model: str,
                 backend: str, options: EpisodeOptions, metadata: dict[str, Any] | None = None,
                 stopping: threading.Event | None = None) -> None:
        self.env, self.family, self.harness, self.proxy = env, family, harness, proxy
        self.model, self.backend, self.options = model, backend, options
        self.metadata = metadata or {}
        self.harness_version = harness.version()
        error = getattr(family, "environment_error", None)
        self.env_errors = (error,) if isinstance(error, type) else ()
        self.stopping = stopping or threading.Event()

    def _sandbox(self, task: Task, agent: bool) -> SandboxHandle:
        with _phase("env_error", "describing the environment", self.env_errors):
            spec = self.family.sandbox_spec(task, self.backend)
            if agent:
                spec = agent_spec(spec, self.harness, self.proxy.url)
        if self.stopping.is_set():
            raise _Failed("infra_error", "the run was interrupted")
        with _phase("infra_error", "creating the sandbox", self.env_errors):
            sandbox = SandboxHandle.create(self.env, spec)
        try:
            with _phase("env_error", "setting up the environment", self.env_errors):
                self.family.setup(task, sandbox)
        except BaseException:
            _destroy(sandbox)
            raise
        return sandbox

    def run(self, task: Task, attempt: int, log_dir: Path | None = None) -> Trajectory:
        """One episode, start to verdict. Never raises for a failure of the task, the harness,
        the model or the sandbox: each ends as a categorised trajectory."""
        agent: AgentResult | None = None
        started, clock = time.time(), time.monotonic()
        key = episode_key(task.suite, task.task_id, self.harness.name, self.model, attempt)
        try:
            sandbox = self._sandbox(task, agent=True)
            try:
                episode = self.proxy.open_episode(key, max_calls=self.options.max_calls,
                                                  max_tokens=self.options.max_tokens)
                agent = run_agent(self.harness, sandbox, self.family, task, episode,
                                  model=self.model, options=self.options, stopping=self.stopping)
            finally:
                _destroy(sandbox)
            if not agent.patch.strip():
                outcome = Outcome(resolved=False, category="empty_patch")
            else:
                sandbox = self._sandbox(task, agent=False)
                try:
                    with _phase("infra_error", "grading", self.env_errors):
                        outcome = self.family.grade(task, sandbox, agent.patch)
                finally:
                    _destroy(sandbox)
        except _Failed as failed:
            outcome = Outcome(resolved=False, category=failed.category, error=str(failed))  # type: ignore[arg-type]
        outcome = settle(Attempt(info=failure_info(agent)), outcome)
        write_logs(log_dir, agent, outcome)
        meta = {**self.metadata, "dataset_sha256": getattr(self.family, "dataset_sha256", None)}
        record = trajectory(task, self.harness, self.model, attempt, agent, outcome, options=self.options,
                            harness_version=self.harness_version, metadata=meta)
        # the whole episode (sandboxes, agent, grading); the agent's own time is in harness_run
        return record.model_copy(update={"started_at": started,
                                         "duration_seconds": round(time.monotonic() - clock, 3)})


def _destroy(sandbox: SandboxHandle) -> None:
    try:
        sandbox.destroy()
    except Exception:  # reaped later by `orchard env gc`; the verdict stands
        pass
