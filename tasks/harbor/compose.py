"""A Harbor task's docker-compose environment (environment/docker-compose.yaml), read into a plan.

Harbor runs such a task with `docker compose`, its own file of the `main` service (built from
environment/, `sleep infinity`, the log folders bound in) merged under the task's. orchard reads
the same file into a `ComposePlan`: `main` is the sandbox (its image built from its `build`,
environment/ by default; its `environment` and `working_dir` kept), and every other service is a
side service the docker backend starts before it on a network private to the episode
(SandboxSpec.services), reached from main by its name.

Read: `build` (a context inside environment/, `dockerfile`, `args`), `image`, `command`,
`entrypoint`, `environment`, `working_dir`, `user`, `healthcheck` (`test`, `disable`),
`depends_on` (the start order). Left out, with no effect here: `container_name`, `ports`,
`expose`, `networks`, `restart`, `deploy`, `init`, `tty`, `stdin_open`, `stop_grace_period`,
`labels`, `logging`, `hostname`, `platform`, `pull_policy`, `mem_limit`, `cpus` (the task's
[environment] limits apply to every container). Refused by name: volumes (a side service sharing
files with main), `network_mode`, privileged containers, capabilities, devices, `extends`,
secrets, configs, a side service that waits on `main`. Variables are interpolated as compose does
(`${VAR}`, `${VAR:-default}`, `$$`), with the ones Harbor sets (`CONTEXT_DIR`, `MAIN_IMAGE_NAME`,
the log paths, `CPUS`, `MEMORY`); any other unset one is empty, as in compose.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PRIMARY = "main"
CONTEXT = "environment"
IGNORED = {"container_name", "ports", "expose", "networks", "restart", "deploy", "init", "tty",
           "stdin_open", "stop_grace_period", "stop_signal", "labels", "logging", "hostname",
           "platform", "pull_policy", "mem_limit", "memswap_limit", "cpus", "shm_size", "ulimits"}
READ = {"build", "image", "command", "entrypoint", "environment", "working_dir", "user",
        "healthcheck", "depends_on"}
MAIN_VOLUMES = ("/logs/verifier", "/logs/agent", "/logs/artifacts")
"""The folders Harbor's own file binds into main (orchard makes them in the sandbox)."""
_VAR = re.compile(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}|\$(\w+)")


class ComposeError(ValueError):
    """Why a compose file cannot run here (`unsupported`), or cannot be read (`invalid`)."""

    def __init__(self, message: str, kind: str = "unsupported") -> None:
        super().__init__(message)
        self.kind = kind


class ServicePlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    context: str | None = None
    """The build context, a folder of the task (environment/ or one inside it); None: `image`."""
    dockerfile: str = "Dockerfile"
    """The Dockerfile's path inside the context."""
    args: dict[str, str] = Field(default_factory=dict)
    image: str | None = None
    command: list[str] | None = None
    entrypoint: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None
    healthcheck: list[str] | None = None


class ComposePlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str
    main: ServicePlan
    sides: list[ServicePlan] = Field(default_factory=list)
    """In start order (depends_on first)."""


def interpolate(text: str, values: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        if m[0] == "$$":
            return "$"
        name = m[1] or m[4]
        value = values.get(name)
        if m[2] in (":-",) and not value:
            return m[3]
        if m[2] == "-" and value is None:
            return m[3]
        if m[2] in (":?", "?") and not value:
            raise ComposeError(f"${{{name}}} is required: {m[3] or 'not set'}", "invalid")
        return value or ""
    return _VAR.sub(one, text)


def _words(value: Any, key: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    raise ComposeError(f"{key}: neither a string nor a list of strings", "invalid")


def _env(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    if isinstance(value, list):
        return dict((item.split("=", 1) + [""])[:2] for item in map(str, value))  # type: ignore[misc]
    raise ComposeError(f"{where}.environment: neither a mapping nor a list", "invalid")


def _context(value: str, where: str) -> str:
    """A build context as a folder of the task: inside environment/, never above it."""
    path = PurePosixPath(CONTEXT) / value if not value.startswith("/") else None
    if path is None or ".." in path.parts:
        raise ComposeError(f"{where}.build: context {value!r} is outside environment/")
    return str(PurePosixPath(*path.parts)) if path.parts else CONTEXT


def _service(name: str, body: Any) -> ServicePlan:
    where = f"services.{name}"
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise ComposeError(f"{where}: not a mapping", "invalid")
    unknown = sorted(set(body) - READ - IGNORED - {"volumes"})
    if unknown:
        raise ComposeError(f"{where} uses {', '.join(unknown)}, which orchard does not run")
    volumes = body.get("volumes") or []
    if name != PRIMARY and volumes:
        raise ComposeError(f"{where} has volumes (files shared between containers are not supported yet)")
    for volume in volumes:  # main: only the log folders Harbor binds in, which orchard makes itself
        target = volume.get("target") if isinstance(volume, dict) else str(volume).split(":")[1:2]
        target = target[0] if isinstance(target, list) and target else target
        if str(target).rstrip("/") not in MAIN_VOLUMES:
            raise ComposeError(f"{where} binds {volume!r} (only Harbor's log folders are supported)")
    plan = ServicePlan(name=name, env=_env(body.get("environment"), where),
                       command=_words(body.get("command"), f"{where}.command"),
                       entrypoint=_words(body.get("entrypoint"), f"{where}.entrypoint"),
                       image=str(body["image"]) if body.get("image") else None,
                       workdir=str(body["working_dir"]) if body.get("working_dir") else None,
                       user=str(body["user"]) if body.get("user") is not None else None)
    build = body.get("build")
    if isinstance(build, str):
        plan.context = _context(build, where)
    elif isinstance(build, dict):
        plan.context = _context(str(build.get("context") or "."), where)
        plan.dockerfile = str(build.get("dockerfile") or "Dockerfile")
        if ".." in PurePosixPath(plan.dockerfile).parts or plan.dockerfile.startswith("/"):
            raise ComposeError(f"{where}.build: dockerfile {plan.dockerfile!r} is outside its context")
        plan.args = _env(build.get("args"), f"{where}.build")
    elif build is not None:
        raise ComposeError(f"{where}.build: neither a path nor a mapping", "invalid")
    if plan.context is None and plan.image is None and name != PRIMARY:
        raise ComposeError(f"{where}: neither build nor image", "invalid")
    health = body.get("healthcheck")
    if isinstance(health, dict) and not health.get("disable") and health.get("test"):
        test = health["test"]
        plan.healthcheck = ["CMD-SHELL", test] if isinstance(test, str) else [str(t) for t in test]
        if plan.healthcheck[0] == "NONE":
            plan.healthcheck = None
    return plan


def _order(services: dict[str, Any]) -> list[str]:
    """Side services, each after those it depends on."""
    def needs(name: str) -> list[str]:
        deps = (services.get(name) or {}).get("depends_on") or []
        return [str(d) for d in (deps if isinstance(deps, list) else list(deps))]

    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise ComposeError(f"services.{name}: depends_on makes a cycle", "invalid")
        visiting.add(name)
        for dep in needs(name):
            if dep == PRIMARY:
                raise ComposeError(f"services.{name} depends on main, which orchard starts last")
            if dep not in services:
                raise ComposeError(f"services.{name} depends on {dep!r}, which is not a service", "invalid")
            visit(dep)
        order.append(name)
    for name in services:
        if name != PRIMARY:
            visit(name)
    return order


def read_compose(text: str, file: str, values: dict[str, str]) -> ComposePlan:
    """The plan of a compose file's text; ComposeError says why it cannot run."""
    import yaml

    try:
        data = yaml.safe_load(interpolate(text, values))
    except yaml.YAMLError as exc:
        raise ComposeError(f"environment/{file} is not valid YAML: {str(exc).splitlines()[0]}", "invalid") from None
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        raise ComposeError(f"environment/{file} has no services mapping", "invalid")
    for key in ("volumes", "secrets", "configs"):
        if data.get(key):
            raise ComposeError(f"environment/{file} declares top-level {key}, which orchard does not run")
    services = data["services"]
    for name in services:
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,62}", str(name)):
            raise ComposeError(f"services.{name}: not a name orchard can give a container", "invalid")
    main = _service(PRIMARY, services.get(PRIMARY))
    if main.context is None and main.image is None:
        main.context = CONTEXT
    return ComposePlan(file=file, main=main, sides=[_service(n, services[n]) for n in _order(services)])


def harbor_values(image: str = "orchard-harbor-main") -> dict[str, str]:
    """The variables Harbor's own compose files set, as orchard gives them (CONTEXT_DIR: the
    environment folder itself)."""
    return {"CONTEXT_DIR": ".", "MAIN_IMAGE_NAME": image, "HOST_VERIFIER_LOGS_PATH": "/logs/verifier",
            "ENV_VERIFIER_LOGS_PATH": "/logs/verifier", "HOST_AGENT_LOGS_PATH": "/logs/agent",
            "ENV_AGENT_LOGS_PATH": "/logs/agent", "HOST_ARTIFACTS_PATH": "/logs/artifacts",
            "ENV_ARTIFACTS_PATH": "/logs/artifacts"}
