"""A Harbor task's image on the docker backend: built from environment/Dockerfile, cached by content.

    image_for(task, image_map)   the image an episode runs in (built once; the engine is the cache)
    base_images(dockerfile)      the images its FROM lines name (build stages left out)
    map_images(dockerfile, map)  FROM lines rewritten by an explicit `--image-map SRC=DST`

The tag is `orchard-harbor/<task>:<hash>`, the hash over the (mapped) Dockerfile and every file of
the build context, so a changed task builds again and an unchanged one never does. A prebuilt
`docker_image` is used when the engine has it. Nothing is pulled: a base image the engine lacks is
`NeedsImage` naming it (orchard runs offline; `--image-map` maps it to one the engine has, on the
record), never a silent substitute.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from pathlib import Path

from orchard_cli.errors import OrchardError

RECIPE = "harbor-image-v1"
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)


class NeedsImage(OrchardError):
    """An image the engine does not have and cannot pull here."""

    def __init__(self, image: str) -> None:
        super().__init__(f"image {image} is not in the docker engine and cannot be pulled here",
                         hint=f"load it (docker load), or map it: --image-map {image}=orchard/base:bookworm")
        self.image = image


class BuildFailed(OrchardError):
    """The task's Dockerfile did not build."""


def parse_image_map(items: list[str] | None) -> dict[str, str]:
    """`SRC=DST` strings -> {SRC: DST}; a malformed one is a UsageError."""
    from orchard_cli.errors import UsageError

    found: dict[str, str] = {}
    for item in items or ():
        src, sep, dst = item.partition("=")
        if not sep or not src.strip() or not dst.strip():
            raise UsageError(f"--image-map {item!r}: expected SRC=DST (e.g. ubuntu:24.04=orchard/base:bookworm)")
        found[src.strip()] = dst.strip()
    return found


def _args(dockerfile: str) -> dict[str, str]:
    """ARG defaults given before the first FROM (they may appear in FROM lines)."""
    found = {}
    for line in dockerfile.splitlines():
        if _FROM.match(line):
            break
        match = re.match(r"^\s*ARG\s+(\w+)=(\S+)", line, re.IGNORECASE)
        if match:
            found[match[1]] = match[2].strip("\"'")
    return found


def _expand(image: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], m[0]), image)


def base_images(dockerfile: str) -> list[str]:
    """The images FROM lines name, in order, without the build's own stages."""
    args, stages, found = _args(dockerfile), set(), []
    for line in dockerfile.splitlines():
        match = _FROM.match(line)
        if not match:
            continue
        image = _expand(match[3], args)
        alias = re.search(r"\bAS\s+(\S+)", match[4], re.IGNORECASE)
        if image.lower() not in stages and image.lower() != "scratch":
            found.append(image)
        if alias:
            stages.add(alias[1].lower())
    return found


def map_images(dockerfile: str, image_map: dict[str, str]) -> str:
    """The Dockerfile with each FROM image that `image_map` names replaced."""
    if not image_map:
        return dockerfile
    args = _args(dockerfile)

    def swap(line: str) -> str:
        match = _FROM.match(line)
        if not match:
            return line
        image = _expand(match[3], args)
        return f"{match[1]}{match[2]}{image_map[image]}{match[4]}" if image in image_map else line
    return "\n".join(swap(line) for line in dockerfile.splitlines()) + "\n"


def image_tag(task_id: str, dockerfile: str, files: dict[str, str]) -> str:
    digest = hashlib.sha256("\x1f".join([RECIPE, dockerfile, *(f"{k}={v}" for k, v in sorted(files.items()))])
                            .encode()).hexdigest()[:16]
    name = re.sub(r"[^a-z0-9_.-]", "-", task_id.lower()).strip(".-")[:100] or "task"
    return f"orchard-harbor/{name}:{digest}"


def has_image(client, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.APIError:  # an unparseable reference
        return False


def _context(folder: Path, task_id: str, context: str, name: str, dockerfile: str) -> bytes:
    """The build context (a folder of the task, read through the guarded loader), its Dockerfile
    at `name` replaced by `dockerfile` (mapped)."""
    from orchard_cli.tasks.kit.taskfiles import TaskFiles

    files = TaskFiles(task_id, folder)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        found = files.read_tree(context) if files.is_dir(context) else {}
        found = {name.removeprefix(context.rstrip("/") + "/"): data for name, data in found.items()}
        found[name] = dockerfile.encode()
        for name, data in sorted(found.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def image_for(task, image_map: dict[str, str]) -> str:
    """The image `task` (a HarborTask) runs in: its prebuilt docker_image when the engine has
    it, else its Dockerfile built (once); for a compose task, its `main` service's. NeedsImage
    when a base is missing; BuildFailed with the build's last lines when the Dockerfile fails."""
    from orchard_cli.env.images import docker_client

    client = docker_client()
    plan = compose_plan(task)
    if plan and not plan.main.context:  # compose main with `image` and no `build`: that image or nothing
        image = image_map.get(plan.main.image, plan.main.image)
        if not has_image(client, image):
            raise NeedsImage(image)
        return image
    prebuilt = task.config.environment.docker_image
    if prebuilt:
        prebuilt = image_map.get(prebuilt, prebuilt)
        if has_image(client, prebuilt) or not (task.dockerfile or plan):
            if not has_image(client, prebuilt):
                raise NeedsImage(prebuilt)
            return prebuilt
    if plan and plan.main.context:
        return build_image(task, image_map, plan.main, task.id)
    return build_image(task, image_map, None, task.id)


def side_images(task, image_map: dict[str, str]) -> dict[str, str]:
    """{service: image} of a compose task's side services: each built from its context (cached
    as the main image is), or its `image` when the engine has it (nothing is pulled)."""
    from orchard_cli.env.images import docker_client

    client = docker_client()
    found = {}
    for service in compose_plan(task).sides:
        if service.context:
            found[service.name] = build_image(task, image_map, service, f"{task.id}-{service.name}")
        else:
            image = image_map.get(service.image, service.image)
            if not has_image(client, image):
                raise NeedsImage(image)
            found[service.name] = image
    return found


def compose_plan(task):
    from orchard_cli.tasks.harbor.compose import ComposePlan

    return ComposePlan.model_validate(task.compose_plan) if task.compose_plan else None


def build_image(task, image_map: dict[str, str], service, name: str) -> str:
    """A Dockerfile of the task built (once; the tag is its content's hash): environment/Dockerfile
    when `service` is None, else a compose service's context, Dockerfile and args."""
    from orchard_cli.env.images import _build_lock, docker_client
    from orchard_cli.tasks.kit.taskfiles import TaskFiles

    client = docker_client()
    context, args = (service.context, service.args) if service else ("environment", {})
    target = service.target if service else None
    within = service.dockerfile if service else "Dockerfile"
    if service is None or (context == "environment" and service.dockerfile == "Dockerfile"):
        text = task.dockerfile or ""
    else:
        text = TaskFiles(task.id, task.folder).read_text(f"{context}/{service.dockerfile}")
    dockerfile = map_images(text, image_map)
    # the bases' ids are part of the tag: a base loaded again (orchard's base rebuilt, a mapped
    # image replaced) makes the task's image again instead of keeping the old one
    bases = []
    for base in base_images(dockerfile):
        if not has_image(client, base):
            raise NeedsImage(base)
        bases.append(f"{base}@{client.images.get(base).id}")
    inside = context.removeprefix("environment").strip("/")
    files = {k: v for k, v in task.environment_files.items() if not inside or k.startswith(inside + "/")}
    tag = image_tag(name, "\n".join([dockerfile, *bases, *(f"ARG {k}={v}" for k, v in sorted(args.items())),
                                       *([f"TARGET {target}"] if target else [])]), files)
    if has_image(client, tag):
        return tag
    with _build_lock(tag):
        if has_image(client, tag):
            return tag
        log: list[str] = []
        try:
            for chunk in client.api.build(fileobj=io.BytesIO(_context(Path(task.folder), task.id, context, within, dockerfile)),
                                          custom_context=True, tag=tag, rm=True, forcerm=True, pull=False,
                                          dockerfile=within, buildargs=args or None, target=target,
                                          labels={"orchard.harbor.task": task.id}, decode=True,
                                          timeout=int(task.config.environment.build_timeout_sec)):
                if "stream" in chunk:
                    log.append(chunk["stream"])
                if "error" in chunk:
                    tail = " | ".join(line.strip() for line in "".join(log).splitlines()[-3:] if line.strip())
                    raise BuildFailed(f"the Dockerfile of {name} did not build: {chunk['error'].strip()}"
                                      + (f" (last lines: {tail[-400:]})" if tail else ""))
        except OrchardError:
            raise
        except Exception as exc:
            raise BuildFailed(f"the Dockerfile of {name} did not build: {exc}") from exc
    return tag


def image_workdir(image: str) -> str:
    """The image's WORKDIR (where Harbor runs the agent, the solution and the tests), '/' if none."""
    from orchard_cli.env.images import docker_client

    config = docker_client().images.get(image).attrs.get("Config") or {}
    return config.get("WorkingDir") or "/"
