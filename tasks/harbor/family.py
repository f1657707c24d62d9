"""The harbor family: Harbor-format task folders (Terminal-Bench 2.0's layout) on orchard (docs/harbor.md).

`HarborFamily` is the catalogue (and the task-level steps); `HarborEpisode` one attempt, which
keeps what its sandbox spec reserved (the local backend's host folder) and gives it back on exit.

    load           task folders (a folder holding task.toml, or folders of them) via the guarded loader
    task_spec      the task's image (tasks/harbor/environment.py: built from environment/Dockerfile,
                   cached by content; `--image-map` applied; a missing base is `needs_image`), its
                   cpus, memory, timeouts, and no network unless `allow_internet`; on the local
                   backend the host's tools when the task adds nothing to orchard's base (hostenv.py)
    prepare        /logs/agent and /logs/verifier made
    reference      gold: solution/ copied in, `bash /solution/solve.sh` within [solution] timeout_sec
                   (near miss: solution/near_miss.sh)
    verify         after the agent (the episode's collect): its trajectory as ATIF at /logs/agent/trajectory.json; /tests and
                   /logs/verifier emptied, tests/ copied in (never seen by the agent), test.sh run
                   with the verifier's env and timeout; reward.txt or reward.json read
    verdict        resolved = every reward at its maximum, 1.0; the rewards kept in `tests`
                   (the episode's grade, from the evidence)
"""

from __future__ import annotations

import base64
import json
import math
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from orchard_cli.env.models import CPU_MAX, SandboxSpec
from orchard_cli.errors import EnvironmentUnavailable, UsageError
from orchard_cli.evidence import CommandOutput, Evidence
from orchard_cli.family import BaseEpisode, BaseFamily, Gold, RunOptions, Source, Suite, SuiteInfo, Task
from orchard_cli.outcome import CategoryInfo, EpisodeFailure, Outcome
from orchard_cli.tasks.harbor.environment import BuildFailed

DATA = Path(__file__).resolve().parent.parent / "data"
REWARD_DIR = "/logs/verifier"
TRAJECTORY = "/logs/agent/trajectory.json"
MAX_REWARD = 1.0
PIECE = 64 * 1024  # base64 characters per command of a gold script
# before the verifier: links (or files) at /logs, /logs/verifier, /tests removed (a link there
# would let the agent's own folder stand in for them), the folders made writable again (an agent
# that locks them must not turn its episode into an error), emptied or made anew
STAGE = """set -e
if [ -L /logs ] || { [ -e /logs ] && [ ! -d /logs ]; }; then rm -rf /logs; fi
for d in /logs/agent /logs/verifier /tests; do
  if [ -L $d ] || { [ -e $d ] && [ ! -d $d ]; }; then rm -rf $d; fi
  mkdir -p $d
done
chmod -R u+rwX /tests /logs/agent /logs/verifier 2>/dev/null || true
find /tests /logs/verifier -mindepth 1 -delete
chmod 0777 /logs/verifier
rm -rf /logs/agent/trajectory.json"""


def _unpack(tar: bytes, dest: str) -> tuple[str, str]:
    """(command, stdin) that unpack a tar into `dest` in the sandbox (stdin is text: base64)."""
    return f"mkdir -p {dest} && base64 -d | tar -xz -C {dest}", base64.b64encode(tar).decode()


def _exports(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())


@contextmanager
def _environment() -> Iterator[None]:
    """A Dockerfile that does not build is the task's environment failing (env_error)."""
    try:
        yield
    except BuildFailed as exc:
        raise EnvironmentUnavailable(exc.message) from exc


class HarborEpisode(BaseEpisode):
    """One attempt at a Harbor task."""

    def __init__(self, family: "HarborFamily", task: Task, options: RunOptions) -> None:
        super().__init__(task, options)
        self.family = family
        self.limits = {"timeout_seconds": family.parsed(task).config.agent.timeout_sec}
        self._specs: list[SandboxSpec] = []

    def __exit__(self, *exc: object) -> None:
        self._give_back()

    def _give_back(self) -> None:
        specs, self._specs = self._specs, []
        for spec in specs:
            release(spec)

    def spec(self, backend: str) -> SandboxSpec:
        """The task's sandbox; what an earlier spec reserved (its sandbox is gone: this is the
        grading sandbox's, or a retry's) is given back first."""
        self._give_back()
        with _environment():
            spec = self.family.task_spec(self.task, backend)
        self._specs.append(spec)
        return spec

    def setup(self, sandbox: Any, *, for_grading: bool = False) -> None:
        with _environment():
            self.family.prepare(self.task, sandbox)

    def prompt(self, workdir: str) -> str:
        return self.family.parsed(self.task).instruction.strip()

    def collect(self, solution: Any, sandbox: Any) -> Evidence:
        evidence = super().collect(solution, sandbox)
        if sandbox is None:
            return evidence
        with _environment():
            return self.family.verify(self.task, sandbox, solution, evidence)

    def grade(self, evidence: Evidence, sandbox: Any) -> Outcome | None:
        return None if sandbox is None else self.family.verdict(self.task, evidence)

    def reference(self, kind: str) -> Gold | None:
        parsed = self.family.parsed(self.task)
        if kind == "gold":
            if parsed.invalid:  # the episode ends invalid_task before any solution runs
                return Gold(commands=[])
            return self.family.script(self.task, "solve.sh") if parsed.has_solution else None
        return self.family.script(self.task, "near_miss.sh") if parsed.has_near_miss else None


def release(spec: SandboxSpec) -> None:
    """What `spec` reserved goes: the local backend's host folder for the task."""
    import shutil

    from orchard_cli.tasks.harbor.hostenv import LABEL

    folder = spec.labels.get(LABEL)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


class HarborFamily(BaseFamily):
    name = "harbor"
    grading = "in_place"
    categories = {
        "unsupported": CategoryInfo(label="not supported yet", color="#c9a227"),
        "invalid_task": CategoryInfo(label="task folder could not be read", color="#a61e4d"),
    }
    suites = (SuiteInfo("harbor-mini", "harbor", str(DATA / "harbor-mini"),
                        "Harbor-format tasks: shell, files, git, a small service, data processing"),)

    def __init__(self) -> None:
        self._parsed: dict[str, Any] = {}
        self.image_map: dict[str, str] = {}
        self._workdirs: dict[str, str] = {}

    # ---- tasks -------------------------------------------------------------------------------
    def load(self, info: SuiteInfo, source: Source) -> Suite:
        """Every task folder (the core selects); a folder that is not a readable task is kept as
        invalid_task, with its cause, unless none is readable."""
        from orchard_cli.tasks.harbor.taskfile import HarborTask, load_task_dir, task_folders

        self.image_map = dict(source.image_map)
        root = Path(source.dataset or info.source)
        if not root.is_dir():
            raise UsageError(f"{root}: not a folder of Harbor tasks (each a folder with task.toml)")
        folders = task_folders(root)
        if not folders:
            raise UsageError(f"{root}: no Harbor task folders (a folder holding task.toml, or folders of them)")
        parsed, broken = [], []
        for folder in folders:
            try:
                parsed.append(load_task_dir(folder))
            except UsageError as exc:
                broken.append(HarborTask.broken(folder, exc.message))
        if broken and (not parsed or len(folders) == 1):
            raise UsageError(broken[0].invalid or "")  # nothing readable: bad input, one line
        for task in broken:  # the others run; these are kept and end invalid_task, with the cause
            print(f"note: {task.id} is not a readable Harbor task, kept as invalid_task: {task.invalid}",
                  file=sys.stderr)
        _say_ignored(parsed)
        parsed += broken
        tasks = []
        for found in parsed:
            self._parsed[found.id] = found
            tasks.append(Task(task_id=found.id, suite=info.name, family=self.name,
                              repo=f"harbor/{found.config.metadata.get('category') or 'task'}",
                              problem_statement=found.instruction, record=found.model_dump(mode="json")))
        return Suite(info=info, tasks=tasks, provenance={"image_map": self.image_map} if self.image_map else {})

    def episode(self, task: Task, options: RunOptions) -> HarborEpisode:
        return HarborEpisode(self, task, options)

    def parsed(self, task: Task) -> Any:
        found = self._parsed.get(task.task_id)
        if found is None:
            from orchard_cli.tasks.harbor.taskfile import HarborTask

            found = self._parsed[task.task_id] = HarborTask.model_validate(task.record)
        return found

    def groups(self, task: Task) -> dict[str, str]:
        meta = self.parsed(task).config.metadata
        return {k: str(meta[k]) for k in ("category", "difficulty") if meta.get(k)}

    def describe(self, task: Task) -> dict[str, Any]:
        parsed = self.parsed(task)
        config = parsed.config
        refusal = parsed.refusal()
        return {"instance_id": task.task_id, "suite": task.suite, "family": self.name, "schema": config.schema,
                "instruction": parsed.instruction, "metadata": config.metadata,
                "environment": "docker_image " + config.environment.docker_image
                if config.environment.docker_image and not parsed.dockerfile
                else (f"compose ({parsed.compose})" if parsed.compose else "Dockerfile"),
                "services": [s["name"] for s in (parsed.compose_plan or {}).get("sides", [])],
                "allow_internet": config.environment.allow_internet,
                "agent_timeout_sec": config.agent.timeout_sec, "verifier_timeout_sec": config.verifier.timeout_sec,
                "cpus": config.environment.cpus, "memory_bytes": config.memory_bytes(),
                "gold": parsed.has_solution, "near_miss": parsed.has_near_miss,
                "refused": f"{refusal[0]}: {refusal[1]}" if refusal else None,
                "ignored_keys": parsed.ignored}

    def env_key(self, task: Task) -> Any:
        parsed = self.parsed(task)
        return (parsed.dockerfile or parsed.config.environment.docker_image, tuple(sorted(parsed.environment_files.items())))

    def script(self, task: Task, name: str) -> Gold:
        """solution/ copied in and `name` run; the tar goes in pieces (one argument may hold 128 KiB)."""
        from orchard_cli.tasks.harbor.taskfile import tree_tar

        parsed = self.parsed(task)
        tar = base64.b64encode(tree_tar(Path(parsed.folder), parsed.id, "solution")).decode()
        commands = [f"printf %s {tar[i:i + PIECE]} {'>' if i == 0 else '>>'} /tmp/.orchard-solution.b64"
                    for i in range(0, len(tar), PIECE)]
        run = f"bash /solution/{name}"
        limit = parsed.config.solution.timeout_sec
        if limit:  # [solution] timeout_sec (the gold solver's own 600 s cap still holds above it)
            run = (f"{{ if command -v timeout >/dev/null; then timeout -k 5 {limit:g} {run}; else {run}; fi; "
                   f"rc=$?; [ $rc -ne 124 ] || echo 'solution/{name} ran past its [solution] timeout_sec "
                   f"({limit:g} s)' >&2; exit $rc; }}")
        return Gold(commands=[*commands, f"{_exports(parsed.config.solution.env)}mkdir -p /solution && "
                              "base64 -d /tmp/.orchard-solution.b64 | tar -xz -C /solution && "
                              f"rm -f /tmp/.orchard-solution.b64 && {run}"])

    # ---- the task-level steps of an episode ---------------------------------------------------
    def task_spec(self, task: Task, backend: str) -> SandboxSpec:
        from orchard_cli.tasks.harbor.environment import NeedsImage, compose_plan, image_for, image_workdir, side_images

        parsed = self.parsed(task)
        refusal = parsed.refusal()
        if refusal:
            raise EpisodeFailure(*refusal)
        plan = compose_plan(parsed)
        if plan and plan.sides and backend != "docker":
            raise EpisodeFailure("unsupported", f"a docker-compose task (main beside {', '.join(s.name for s in plan.sides)}): "
                                 f"the {backend} backend cannot start side services; run it with --backend docker")
        if backend == "local":
            if plan and (why := _not_default_main(plan.main)):
                raise EpisodeFailure("needs_image", f"on the local backend: the compose file's main service {why}, "
                                     "which the host cannot give; run it with --backend docker")
            return self._host_spec(task, parsed)
        if backend != "docker":
            raise EpisodeFailure("needs_image", f"the {backend} backend cannot build this task's image "
                                 "(run it with --backend docker)")
        try:
            image = image_for(parsed, self.image_map)
            sides = side_images(parsed, self.image_map) if plan else {}
        except NeedsImage as exc:
            raise EpisodeFailure("needs_image", f"{exc.message}; {exc.hint}") from None
        workdir = self._workdirs.get(image) or self._workdirs.setdefault(image, image_workdir(image))
        if plan and plan.main.workdir:
            workdir = plan.main.workdir
        config = parsed.config
        memory = config.memory_bytes()
        services = [{"name": s.name, "image": sides[s.name], "command": s.command, "entrypoint": s.entrypoint,
                     "env": s.env, "workdir": s.workdir, "user": s.user, "healthcheck": s.healthcheck,
                     "depends_on": s.depends_on, "completes": s.completes}
                    for s in plan.sides] if plan else []
        return SandboxSpec.model_validate({
            "services": services, "image": image, "writable_root": True,
            "workdir": workdir if workdir != "/" else "/workspace",
            "network": "full" if config.environment.allow_internet else "none",
            "cpu": min(float(config.environment.cpus), CPU_MAX),
            "memory": f"{max(memory >> 20, 256)}Mi" if memory else "2Gi",
            "timeout": int(config.agent.timeout_sec + config.verifier.timeout_sec) + 900,
            "env": {**(plan.main.env if plan else {}), **config.environment.env},
            "labels": {"orchard.harbor.task": parsed.id[:63]}})

    def _host_spec(self, task: Task, parsed: Any) -> SandboxSpec:
        """The local backend: the host's tools, when the task adds nothing to orchard's base
        (tasks/harbor/hostenv.py); else needs_image, saying why."""
        from orchard_cli.tasks.harbor.hostenv import LABEL, host_folder, host_plan

        plan = host_plan(parsed, self.image_map)
        if isinstance(plan, str):
            raise EpisodeFailure("needs_image", f"on the local backend: {plan}; run it with --backend docker")
        workdir, _, env = plan
        folder = host_folder(parsed.id)
        config = parsed.config
        memory = config.memory_bytes()
        return SandboxSpec.model_validate({
            "image": "host", "workdir": workdir, "network": "none",
            "cpu": min(float(config.environment.cpus), CPU_MAX),
            "memory": f"{max(memory >> 20, 256)}Mi" if memory else "2Gi",
            "timeout": int(config.agent.timeout_sec + config.verifier.timeout_sec) + 900,
            "env": {**env, **config.environment.env},
            "mounts": [{"source": str(folder / name), "target": f"/{name}", "read_only": False}
                       for name in ("logs", "tests", "solution")],
            "labels": {"orchard.harbor.task": parsed.id[:63], LABEL: str(folder)}})

    def prepare(self, task: Task, sandbox: Any) -> None:
        from orchard_cli.tasks.harbor.hostenv import LABEL, copy_in, host_plan

        if LABEL in sandbox.info.spec.labels:
            workdir, copies, _ = host_plan(self.parsed(task), self.image_map)  # type: ignore[misc]
            copy_in(self.parsed(task), sandbox, workdir, copies)
        job = sandbox.exec("mkdir -p /logs/agent /logs/verifier", timeout=60)
        if not job.ok:
            raise BuildFailed(f"could not make /logs in the sandbox: {(job.stderr or job.error or '').strip()[-200:]}")

    def _trajectory(self, task: Task, solution: Any) -> dict[str, Any]:
        from orchard_cli.atif import from_episode
        from orchard_cli.conversation import conversation

        agent = getattr(solution, "agent", None)
        records = list(agent.records) if agent is not None else []
        messages, tools = conversation(records) if records else ([], [])
        if not messages:  # no model ran (gold, empty): the instruction, and what the solver said
            messages = [{"role": "user", "content": self.parsed(task).instruction}]
            if getattr(solution, "answer", None):
                messages.append({"role": "assistant", "content": solution.answer})
        info = agent.run.info if agent is not None else {}
        return from_episode(session_id=f"{task.suite}/{task.task_id}", agent=info.get("harness") or "orchard",
                            agent_version=info.get("version"), model=getattr(solution, "model", None),
                            messages=messages, tools=tools, calls=records).dump()

    def verify(self, task: Task, sandbox: Any, solution: Any, evidence: Evidence) -> Evidence:
        """After the agent: the trajectory and tests/ in, the verifier run, its rewards read."""
        from orchard_cli.tasks.harbor.taskfile import tree_tar

        parsed = self.parsed(task)
        # the agent is done. Whatever it left at /logs, /logs/verifier or /tests does not count: a
        # symlink there is removed (not followed), the folders made anew, then the trajectory and
        # the tests (never seen by the agent) are written in
        job = sandbox.exec(STAGE, timeout=120)
        if not job.ok:
            raise RuntimeError(f"could not make /tests and {REWARD_DIR} anew: {(job.stderr or job.error or '').strip()[-200:]}")
        trajectory = json.dumps(self._trajectory(task, solution), indent=1)
        evidence.attachments["trajectory.json"] = trajectory.encode()
        job = sandbox.exec(f"cat > {TRAJECTORY}", stdin=trajectory, timeout=60)
        if not job.ok:
            raise RuntimeError(f"could not write {TRAJECTORY}: {(job.stderr or job.error or '').strip()[-200:]}")
        command, stdin = _unpack(tree_tar(Path(parsed.folder), parsed.id, "tests"), "/tests")
        job = sandbox.exec(command, stdin=stdin, timeout=120)
        if not job.ok:
            raise RuntimeError(f"could not copy tests/ in: {(job.stderr or job.error or '').strip()[-200:]}")
        config = parsed.config.verifier
        run = sandbox.exec(f"{_exports(config.env)}bash /tests/test.sh", timeout=config.timeout_sec)
        if run.exit_code is None and not getattr(run, "timed_out", False):
            raise RuntimeError(f"the verifier did not run: {(run.error or run.stderr or '').strip()[-200:]}")
        evidence.commands.append(CommandOutput(command="bash /tests/test.sh", exit_code=run.exit_code,
                                               stdout=run.stdout[-8000:], stderr=(run.stderr or run.error or "")[-8000:]))
        found = sandbox.exec(f"cd {REWARD_DIR} && for f in reward.json reward.txt; do [ -f $f ] && "
                             "{ echo \"== $f\"; head -c 65536 $f; echo; }; done; true", timeout=60)
        evidence.state = {"verifier_exit_code": run.exit_code, "verifier_timed_out": bool(getattr(run, "timed_out", False)),
                          **read_rewards(found.stdout)}
        return evidence

    def verdict(self, task: Task, evidence: Evidence) -> Outcome:
        state = evidence.state
        rewards: dict[str, float] = state.get("rewards") or {}
        log = "\n".join(c.stdout + c.stderr for c in evidence.commands)[-20000:]
        if state.get("verifier_timed_out"):  # as Harbor: no verdict from a verifier cut short
            return Outcome(resolved=False, category="env_error", log=log,
                           error=f"the verifier ran past its {self.parsed(task).config.verifier.timeout_sec:g} s",
                           tests={"verifier_exit_code": state.get("verifier_exit_code")})
        if not rewards:  # a verifier that gave no verdict is an error, never `unresolved`
            why = state.get("reward_error") or "the verifier wrote neither reward.txt nor reward.json"
            return Outcome(resolved=False, category="env_error", error=why, log=log,
                           tests={"verifier_exit_code": state.get("verifier_exit_code")})
        resolved = all(v >= MAX_REWARD for v in rewards.values())
        return Outcome(resolved=resolved, category="resolved" if resolved else "unresolved",
                       reward=sum(rewards.values()) / len(rewards), log=log,
                       tests={"rewards": rewards, "source": state.get("reward_file"),
                              "summary": " ".join(f"{k}={v:g}" for k, v in rewards.items())})


def _not_default_main(main: Any) -> str | None:
    """What a compose file's main service sets beyond the default build of environment/Dockerfile
    (the local backend reads only that Dockerfile), or None."""
    if main.context is None:
        return f"runs the image {main.image}"
    sets = [name for name, value in (("build.context", main.context != "environment"),
                                     ("build.dockerfile", main.dockerfile != "Dockerfile"), ("build.args", main.args),
                                     ("build.target", main.target), ("environment", main.env),
                                     ("working_dir", main.workdir), ("user", main.user)) if value]
    return f"sets {', '.join(sets)}" if sets else None


NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _refuse_constant(name: str) -> float:
    raise ValueError(name)


def _say_ignored(parsed: list[Any]) -> None:
    """One line on stderr for the task.toml keys left out (as Harbor leaves them out)."""
    counts: dict[str, int] = {}
    for task in parsed:
        for key in task.ignored:
            counts[key] = counts.get(key, 0) + 1
    if counts:
        keys = ", ".join(f"{k} ({n} task{'s' if n > 1 else ''})" if n > 1 else k for k, n in counts.items())
        print(f"note: task.toml keys Harbor's format does not define were left out: {keys}", file=sys.stderr)


def read_rewards(text: str) -> dict[str, Any]:
    """The rewards from what the verifier left: reward.json (a number, or names -> numbers; other
    keys are left out, as Harbor does) wins over reward.txt (one number); a malformed or
    non-finite value is `reward_error`, never a guess."""
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("== "):
            current = line[3:].strip()
            sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    for name in ("reward.json", "reward.txt"):
        if name not in sections:
            continue
        body = sections[name].strip()
        try:
            if name.endswith(".json"):
                value = json.loads(body, parse_constant=_refuse_constant)
            elif NUMBER.fullmatch(body):
                value = float(body)
            else:
                raise ValueError(body)
        except ValueError:
            return {"reward_file": name, "reward_error": f"{name} is not a number: {body[:80]!r}"}
        if isinstance(value, dict):
            value = {str(k): _finite(v) for k, v in value.items() if _number(v)}
            if value and all(v is not None for v in value.values()):
                return {"reward_file": name, "rewards": value}
        elif _number(value) and (number := _finite(value)) is not None:
            return {"reward_file": name, "rewards": {"reward": number}}
        return {"reward_file": name, "reward_error": f"{name} holds neither a finite number nor names -> numbers"}
    return {}


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return number if math.isfinite(number) else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
