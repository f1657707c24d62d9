"""Harbor's task folder, read through the guarded loader (tasks/kit/taskfiles.py).

    <task>/task.toml               the configuration (the `TaskConfig` model below)
    <task>/instruction.md          what the agent is asked
    <task>/environment/Dockerfile  the sandbox's image (or environment/docker-compose.yaml)
    <task>/tests/test.sh           the verifier: writes /logs/verifier/reward.txt or reward.json
    <task>/solution/solve.sh       the reference solution (optional; `--predictions gold`)

Schema versions read: Harbor's 1.0 (`version = "1.0"`, `[environment] memory = "2G"`,
`storage = "10G"`, `allow_internet`: Terminal-Bench 2.0's spelling) and the later 1.x
(`schema_version = "1.x"`, a `[task]` table, `memory_mb`, `storage_mb`, `network_mode`). Both are read into one
model; what orchard cannot run yet (multi-step tasks, a separate verifier environment, MCP
servers, the parts of docker-compose it does not run (compose.py), GPUs, a Windows image) is
kept as `refusal`, a reason the episode gives by name, never a silent half-run. `near_miss.sh` beside solve.sh is orchard's own
addition: a plausible wrong solution `tasks validate` checks fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchard_cli.errors import UsageError

TASK_FILE = "task.toml"
TOML_LIMIT = 1 << 20
TEXT_LIMIT = 4 << 20
SCRIPT_TREE_LIMIT = 64 << 20
"""Bytes tests/ or solution/ may hold (they travel into the sandbox)."""
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")


class _Section(BaseModel):
    # keys Harbor's model does not know are left out, as Harbor's own loader does (many public
    # tasks carry their own: workdir, tags, description, ...); `ignored_keys` names them, and a
    # near miss of a known key says which one it is likely meant to be
    model_config = ConfigDict(extra="allow")


class VerifierConfig(_Section):
    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    environment: dict[str, Any] | None = None
    """A separate verifier environment (later schemas): refused by name."""


class AgentConfig(_Section):
    timeout_sec: float = Field(600.0, gt=0)
    setup_timeout_sec: float | None = None
    user: str | int | None = None


class SolutionConfig(_Section):
    env: dict[str, str] = Field(default_factory=dict)
    timeout_sec: float | None = None


class EnvironmentConfig(_Section):
    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    cpus: float = Field(1, gt=0)
    memory_mb: int | None = Field(None, gt=0)
    storage_mb: int | None = Field(None, gt=0)
    memory: str | None = None
    """1.0's spelling ('2G', '512M'); memory_mb wins when both are given."""
    storage: str | None = None
    allow_internet: bool = False
    network_mode: Literal["public", "no-network", "allowlist"] | None = None
    """The later schemas' spelling of allow_internet; it wins over allow_internet, as in Harbor.
    "allowlist" (or allowed_hosts) is refused by name."""
    allowed_hosts: list[str] = Field(default_factory=list)
    gpus: int = 0
    gpu_types: list[str] | None = None
    os: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    mcp_servers: list[dict[str, Any]] | None = None
    skills_dir: str | None = None

    @model_validator(mode="after")
    def _network_mode(self) -> "EnvironmentConfig":
        if self.network_mode in ("public", "no-network"):
            self.allow_internet = self.network_mode == "public"
        return self


class TaskConfig(_Section):
    """task.toml, every schema version Harbor's loader reads, as one model."""

    version: str | None = None
    schema_version: str | None = None
    task: dict[str, Any] | None = None
    """The later schemas' [task] table: name, description, authors, keywords."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    source: str | None = None
    artifacts: list[Any] = Field(default_factory=list)
    """Paths Harbor collects from the sandbox after a trial (kept, not used by orchard)."""
    steps: list[dict[str, Any]] | None = None
    """Multi-step tasks (later schemas): refused by name."""

    @property
    def schema(self) -> str:
        return self.schema_version or self.version or "1.0"

    def memory_bytes(self) -> int | None:
        if self.environment.memory_mb:
            return self.environment.memory_mb << 20
        return _size(self.environment.memory) if self.environment.memory else None


def _size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not match:
        raise ValueError(f"not a size: {text!r} (e.g. 2G, 512M)")
    return int(float(match[1]) * 1024 ** " kmgt".index(match[2] or " "))


class HarborTask(BaseModel):
    """One task folder, read and checked."""

    model_config = ConfigDict(extra="forbid")

    id: str
    folder: str
    config: TaskConfig
    instruction: str
    dockerfile: str | None = None
    compose: str | None = None
    """The compose file's name, when the environment is docker-compose."""
    compose_plan: Any = None
    """Its plan (tasks/harbor/compose.py: main and the side services), when it can run."""
    compose_error: tuple[str, str] | None = None
    """(category, reason) when it cannot: `unsupported` or `invalid_task`."""
    environment_files: dict[str, str] = Field(default_factory=dict)
    """Path inside environment/ -> sha256 of its bytes (the build context's content hash)."""
    has_solution: bool = False
    has_near_miss: bool = False
    ignored: list[str] = Field(default_factory=list)
    """task.toml keys left out (ignored_keys)."""
    invalid: str | None = None
    """Why this folder could not be read as a task (it is kept, and every episode of it ends
    `invalid_task` with this reason, so one broken folder does not refuse a dataset)."""

    @classmethod
    def broken(cls, folder: Path, why: str) -> "HarborTask":
        return cls(id=folder.name, folder=str(folder), config=TaskConfig(), instruction="", invalid=why)

    def refusal(self) -> tuple[str, str] | None:
        """(category, reason) this task is refused with before any sandbox, or None."""
        if self.invalid:
            return "invalid_task", self.invalid
        c = self.config
        if c.steps:
            return "unsupported", "a multi-step task ([[steps]]): orchard runs single-step Harbor tasks"
        if c.verifier.environment:
            return "unsupported", "a separate verifier environment ([verifier.environment]) is not supported yet"
        if c.environment.mcp_servers:
            return "unsupported", "the task declares MCP servers ([environment].mcp_servers), not supported yet"
        if self.compose_error:
            return self.compose_error
        if c.environment.network_mode == "allowlist" or c.environment.allowed_hosts:
            return "unsupported", "a host allowlist ([environment] network_mode = \"allowlist\") is not supported yet"
        if c.environment.gpus:
            return "unsupported", f"it needs {c.environment.gpus} GPU(s)"
        if c.environment.os and c.environment.os.lower() not in ("linux",):
            return "unsupported", f"its environment is {c.environment.os}, not Linux"
        if not self.dockerfile and not c.environment.docker_image and not self.compose_plan:
            return "unsupported", "no environment/Dockerfile and no docker_image"
        return None


def ignored_keys(config: TaskConfig) -> list[str]:
    """The task.toml keys orchard (as Harbor) leaves out, each with the known key it is likely a
    misspelling of ('agent.timeout_secs (did you mean agent.timeout_sec?)')."""
    import difflib

    out = []
    sections: list[tuple[str, BaseModel]] = [("", config)]
    sections += [(f"{name}.", getattr(config, name)) for name in ("verifier", "agent", "environment", "solution")]
    for prefix, model in sections:
        known = list(type(model).model_fields)
        for key in sorted(model.model_extra or {}):
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
            out.append(f"{prefix}{key}" + (f" (did you mean {prefix}{close[0]}?)" if close else ""))
    return out


def _where(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    return f"{field or '(top level)'}: {first['msg']}"


def load_task_dir(folder: Path) -> HarborTask:
    """One Harbor task folder through the guarded loader; a malformed one is one line naming the
    file and the field."""
    import hashlib
    import tomllib

    from orchard_cli.tasks.kit.taskfiles import TaskFiles

    files = TaskFiles(folder.name, folder)
    if not files.exists(TASK_FILE):
        raise UsageError(f"{folder}: no {TASK_FILE} in this task folder")
    try:
        data = tomllib.loads(files.read_text(TASK_FILE, limit=TOML_LIMIT))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{folder / TASK_FILE}: not valid TOML: {exc}") from None
    try:
        config = TaskConfig.model_validate(data)
        config.memory_bytes()
    except ValidationError as exc:
        raise UsageError(f"{folder / TASK_FILE}: {_where(exc)}") from None
    except ValueError as exc:
        raise UsageError(f"{folder / TASK_FILE}: environment.memory: {exc}") from None
    if not files.exists("instruction.md"):
        raise UsageError(f"{folder}: no instruction.md in this task folder")
    if not files.exists("tests/test.sh"):
        raise UsageError(f"{folder}: no tests/test.sh (the verifier) in this task folder")
    files.files("tests", total=SCRIPT_TREE_LIMIT)  # refused now, not in the episode
    dockerfile = files.read_text("environment/Dockerfile", limit=TEXT_LIMIT) \
        if files.exists("environment/Dockerfile") else None
    compose = next((n for n in COMPOSE_FILES if files.exists(f"environment/{n}")), None)
    hashes = {}
    if files.is_dir("environment"):
        for name, path in files.files("environment"):
            hashes[name.removeprefix("environment/")] = hashlib.sha256(files.read_bytes(name)).hexdigest()
    plan, error = _compose(files, compose) if compose else (None, None)
    has_solution = files.exists("solution/solve.sh")
    if has_solution:
        files.files("solution", total=SCRIPT_TREE_LIMIT)
    return HarborTask(id=folder.name, folder=str(folder), config=config,
                      instruction=files.read_text("instruction.md", limit=TEXT_LIMIT), dockerfile=dockerfile,
                      compose=compose, compose_plan=plan, compose_error=error, environment_files=hashes, has_solution=has_solution,
                      has_near_miss=files.exists("solution/near_miss.sh"), ignored=ignored_keys(config))


def _compose(files: Any, name: str) -> tuple[dict | None, tuple[str, str] | None]:
    """(plan, None) for a compose file orchard runs, else (None, (category, reason))."""
    from orchard_cli.tasks.harbor.compose import ComposeError, harbor_values, read_compose

    try:
        plan = read_compose(files.read_text(f"environment/{name}", limit=TEXT_LIMIT), name, harbor_values())
        for service in [plan.main, *plan.sides]:
            if service.context and not files.exists(f"{service.context}/{service.dockerfile}"):
                raise ComposeError(f"services.{service.name}: no {service.context}/{service.dockerfile}", "invalid")
    except ComposeError as exc:
        where = f"a docker-compose environment (environment/{name})"
        return None, ("invalid_task" if exc.kind == "invalid" else "unsupported", f"{where}: {exc}")
    return plan.model_dump(), None


def task_folders(root: Path) -> list[Path]:
    from orchard_cli.tasks.kit.taskfiles import task_folders as folders

    return folders(root, TASK_FILE)


def tree_tar(folder: Path, task: str, rel: str) -> bytes:
    """The files under `rel` of a task folder as a gzipped tar (names relative to `rel`),
    read through the guarded loader; scripts keep an executable bit."""
    import io
    import tarfile

    from orchard_cli.tasks.kit.taskfiles import TaskFiles

    files = TaskFiles(task, folder)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, _ in files.files(rel, total=SCRIPT_TREE_LIMIT):
            data = files.read_bytes(name)
            info = tarfile.TarInfo(name.removeprefix(rel.rstrip("/") + "/"))
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
