"""A Harbor task's docker-compose environment (environment/docker-compose.yaml), read into a plan.

Harbor runs such a task with `docker compose`, its own file of the `main` service (built from
environment/, `sleep infinity`, the log folders bound in) merged under the task's. orchard reads
the same file into a `ComposePlan`: `main` is the sandbox (its image built from its `build`,
environment/ by default; its `environment` and `working_dir` kept), and every other service is a
side service the docker backend starts before it on a network private to the episode
(SandboxSpec.services), reached from main by its name.

Read: `build` (a context inside environment/, `dockerfile`, `args`, `target`), `image`, `command`,
`entrypoint`, `environment`, `working_dir`, `user`, `healthcheck` (`test`, `disable`),
`depends_on` (the start order, each with its `condition`: started, healthy, or, for a one-shot
job, completed successfully). Left out, with no effect here: `container_name`, `ports`,
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
BUILD_READ = {"context", "dockerfile", "args", "target"}
BUILD_IGNORED = {"cache_from", "cache_to", "labels", "tags", "platforms", "pull", "no_cache", "shm_size",
                 "network", "extra_hosts", "isolation"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
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
    """The Dockerfile's path inside the context (normalised: `./Dockerfile` is `Dockerfile`)."""
    args: dict[str, str] = Field(default_factory=dict)
    target: str | None = None
    """The build stage to build (`build.target`)."""
    image: str | None = None
    command: list[str] | None = None
    entrypoint: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None
    healthcheck: list[str] | None = None
    depends_on: dict[str, str] = Field(default_factory=dict)
    """Service -> the condition waited for before this one starts (compose's names)."""
    completes: bool = False
    """A one-shot job (some service waits for it with service_completed_successfully): it is to
    exit 0, and is not expected to stay running."""


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
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ComposeError(f"{key}: {exc} in {value[:80]!r}", "invalid") from None
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
    raise ComposeError(f"{where}: neither a mapping nor a list", "invalid")


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
    odd = [k for k in body if not isinstance(k, str)]
    if odd:
        raise ComposeError(f"{where}: the key {odd[0]!r} is not a name", "invalid")
    unknown = sorted(set(body) - READ - IGNORED - {"volumes"})
    if unknown:
        raise ComposeError(f"{where} uses {', '.join(unknown)}, which orchard does not run")
    volumes = body.get("volumes") or []
    if not isinstance(volumes, list):
        raise ComposeError(f"{where}.volumes: not a list", "invalid")
    if name != PRIMARY and volumes:
        raise ComposeError(f"{where} has volumes (files shared between containers are not supported yet)")
    for volume in volumes:  # main: only the log folders Harbor binds in, which orchard makes itself
        target = volume.get("target") if isinstance(volume, dict) else str(volume).split(":")[1:2]
        target = target[0] if isinstance(target, list) and target else target
        if str(target).rstrip("/") not in MAIN_VOLUMES:
            raise ComposeError(f"{where} binds {volume!r} (only Harbor's log folders are supported)")
    plan = ServicePlan(name=name, env=_env(body.get("environment"), f"{where}.environment"),
                       command=_words(body.get("command"), f"{where}.command"),
                       entrypoint=_words(body.get("entrypoint"), f"{where}.entrypoint"),
                       image=str(body["image"]) if body.get("image") else None,
                       workdir=str(body["working_dir"]) if body.get("working_dir") else None,
                       user=str(body["user"]) if body.get("user") is not None else None)
    build = body.get("build")
    if isinstance(build, str):
        plan.context = _context(build, where)
    elif isinstance(build, dict):
        unknown = sorted(map(str, set(build) - BUILD_READ - BUILD_IGNORED))
        if unknown:
            raise ComposeError(f"{where}.build uses {', '.join(unknown)}, which orchard does not run")
        plan.context = _context(str(build.get("context") or "."), where)
        dockerfile = str(build.get("dockerfile") or "Dockerfile")
        if ".." in PurePosixPath(dockerfile).parts or dockerfile.startswith("/"):
            raise ComposeError(f"{where}.build: dockerfile {dockerfile!r} is outside its context")
        plan.dockerfile = str(PurePosixPath(dockerfile))  # `./Dockerfile` is `Dockerfile`
        if plan.dockerfile == ".":
            raise ComposeError(f"{where}.build: dockerfile {dockerfile!r} is not a file", "invalid")
        plan.args = _env(build.get("args"), f"{where}.build.args")
        if build.get("target") is not None:
            if not isinstance(build["target"], str):
                raise ComposeError(f"{where}.build.target: not a string", "invalid")
            plan.target = build["target"]
    elif build is not None:
        raise ComposeError(f"{where}.build: neither a path nor a mapping", "invalid")
    if plan.context is None and plan.image is None and name != PRIMARY:
        raise ComposeError(f"{where}: neither build nor image", "invalid")
    health = body.get("healthcheck")
    if health is not None and not isinstance(health, dict):
        raise ComposeError(f"{where}.healthcheck: not a mapping", "invalid")
    if health and not health.get("disable") and health.get("test"):
        test = health["test"]
        if isinstance(test, str):
            plan.healthcheck = ["CMD-SHELL", test]
        elif isinstance(test, list) and test and all(isinstance(t, (str, int, float)) for t in test):
            plan.healthcheck = [str(t) for t in test]
        else:
            raise ComposeError(f"{where}.healthcheck.test: neither a string nor a list of strings", "invalid")
        if plan.healthcheck[0] == "NONE":
            plan.healthcheck = None
    plan.depends_on = _depends(body.get("depends_on"), where)
    return plan


def _depends(value: Any, where: str) -> dict[str, str]:
    """depends_on as {service: condition}: a list of names (each `service_started`) or a mapping
    of name -> {condition}."""
    if value is None:
        return {}
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return dict.fromkeys(value, "service_started")
    if not isinstance(value, dict):
        raise ComposeError(f"{where}.depends_on: neither a list of names nor a mapping", "invalid")
    found = {}
    for dep, how in value.items():
        if not isinstance(dep, str) or not (how is None or isinstance(how, dict)):
            raise ComposeError(f"{where}.depends_on.{dep}: not a name with a mapping", "invalid")
        condition = (how or {}).get("condition") or "service_started"
        if not isinstance(condition, str) or condition not in CONDITIONS:
            raise ComposeError(f"{where}.depends_on.{dep}.condition: {str(condition)[:40]!r} is not one of "
                               f"{', '.join(sorted(CONDITIONS))}", "invalid")
        found[dep] = condition
    return found


def _order(plans: dict[str, ServicePlan]) -> list[str]:
    """Side services, each after those it depends on (iterative: a long chain is no recursion)."""
    order: list[str] = []
    done: set[str] = set()
    for root in plans:
        if root == PRIMARY or root in done:
            continue
        stack, path = [(root, iter(plans[root].depends_on))], {root}
        while stack:
            name, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                stack.pop()
                path.discard(name)
                done.add(name)
                order.append(name)
                continue
            if dep == PRIMARY:
                raise ComposeError(f"services.{name} depends on main, which orchard starts last")
            if dep not in plans:
                raise ComposeError(f"services.{name} depends on {dep!r}, which is not a service", "invalid")
            if dep in path:
                raise ComposeError(f"services.{name}: depends_on makes a cycle", "invalid")
            if dep not in done:
                stack.append((dep, iter(plans[dep].depends_on)))
                path.add(dep)
    return order


def _conditions(plans: dict[str, ServicePlan]) -> None:
    """The one-shot jobs marked (a service_healthy one may get its health check from its image)."""
    for plan in plans.values():
        for dep, condition in plan.depends_on.items():
            if condition == "service_completed_successfully":
                plans[dep].completes = True


def read_compose(text: str, file: str, values: dict[str, str]) -> ComposePlan:
    """The plan of a compose file's text; ComposeError says why it cannot run."""
    import yaml

    try:
        data = yaml.safe_load(interpolate(text, values))
    except yaml.YAMLError as exc:
        raise ComposeError(f"environment/{file} is not valid YAML: {str(exc).splitlines()[0]}", "invalid") from None
    except RecursionError:
        raise ComposeError(f"environment/{file} nests too deep to read", "invalid") from None
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        raise ComposeError(f"environment/{file} has no services mapping", "invalid")
    for key in ("volumes", "secrets", "configs"):
        if data.get(key):
            raise ComposeError(f"environment/{file} declares top-level {key}, which orchard does not run")
    services = data["services"]
    for name in services:
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,62}", name):
            raise ComposeError(f"services.{name}: not a name orchard can give a container", "invalid")
    plans = {name: _service(name, body) for name, body in services.items()}  # each body a mapping
    main = plans.get(PRIMARY) or _service(PRIMARY, None)
    if main.context is None and main.image is None:
        main.context = CONTEXT
    order = _order(plans)
    for dep in main.depends_on:
        if dep == PRIMARY or dep not in plans:
            raise ComposeError(f"services.main depends on {dep!r}, which is not a side service", "invalid")
    _conditions({**plans, PRIMARY: main})
    return ComposePlan(file=file, main=main, sides=[plans[n] for n in order])


def harbor_values(image: str = "orchard-harbor-main") -> dict[str, str]:
    """The variables Harbor's own compose files set, as orchard gives them (CONTEXT_DIR: the
    environment folder itself)."""
    return {"CONTEXT_DIR": ".", "MAIN_IMAGE_NAME": image, "HOST_VERIFIER_LOGS_PATH": "/logs/verifier",
            "ENV_VERIFIER_LOGS_PATH": "/logs/verifier", "HOST_AGENT_LOGS_PATH": "/logs/agent",
            "ENV_AGENT_LOGS_PATH": "/logs/agent", "HOST_ARTIFACTS_PATH": "/logs/artifacts",
            "ENV_ARTIFACTS_PATH": "/logs/artifacts"}
