"""SWE environments on the docker backend when the official image is not to be had.

The image is made from the environment the local backend builds (environment.py), not from a
second recipe: the interpreter prefix with the recipe installed goes to
/opt/miniconda3/envs/testbed (where SWE-bench's eval scripts expect it), artifacts.tar next to it,
the `conda activate` shim at /opt/miniconda3/bin/activate, all `FROM orchard/base:bookworm`
(git, patch, bash). Shared libraries the prefix's ELF files load from the host (ldd) and the base
image lacks are copied into /usr/local/lib/orchard-swe; the prefix's own lib/ is put in ld.so's
cache, and the interpreter's original prefix path (its RUNPATH, sysconfig) is a link to the copy.
The recipe's system-wide pre_install lines (`apt-get install -y graphviz`, `locale-gen`), which the
local build cannot run, run as RUN lines of the image (apt needs Debian's mirror then).

The engine is the cache: the image `orchard/swe-env:<key>` carries the recipe key and a hash of
this recipe as labels, so it is built once per machine per key. Its sandboxes mount the repository
mirror read-only at /orchard/repo; `SWEFamily.prepare` runs the local backend's per-instance setup
script (clone at base_commit into the workspace, unpack artifacts.tar, commit).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from orchard_cli.env.models import Mount, SandboxSpec
from orchard_cli.tasks.swe import environment as envs
from orchard_cli.tasks.swe.environment import (
    ACTIVATE_SHIM,
    ACTIVE_ENV,
    ENVS_MOUNT,
    GIT_ENV,
    REPO_MOUNT,
    EnvironmentUnavailable,
)
from orchard_cli.tasks.swe.instance import ACTIVATE, ENV_PREFIX, TESTBED, EnvironmentRecipe

IMAGE_REPO = "orchard/swe-env"
KEY_LABEL = "orchard.swe.env"      # on the image and on every sandbox spec that uses one
RECIPE_LABEL = "orchard.recipe"
LIB_DIR = "/usr/local/lib/orchard-swe"
FORMAT = 2  # bump when the image layout below changes (2: the recipe's system-wide lines)
DOCKERFILE = f"""\
COPY opt/ /opt/
COPY libs/ {LIB_DIR}/
RUN printf '%s\\n' {ENV_PREFIX}/lib {LIB_DIR} > /etc/ld.so.conf.d/orchard-swe.conf && ldconfig \\
 && {{ [ -z "$ORIGINAL" ] || {{ mkdir -p "$(dirname "$ORIGINAL")" && ln -s {ENV_PREFIX} "$ORIGINAL"; }}; }} \\
 && {ENV_PREFIX}/bin/python -c 'import sys; print(sys.version)'
"""


def image_recipe() -> str:
    """Changes whenever the base image or the way the image is laid out changes."""
    from orchard_cli.env.images import recipe_hash

    return hashlib.sha256(repr((FORMAT, recipe_hash(), DOCKERFILE, ACTIVATE_SHIM)).encode()).hexdigest()[:16]


def image_tag(key: str) -> str:
    tag = key if len(key) <= 128 else f"{key[:115]}{key[-13:]}"
    return f"{IMAGE_REPO}:{tag}"


def built_here(spec: SandboxSpec) -> bool:
    """Whether a sandbox runs an image of this module (not an official SWE-bench image)."""
    return KEY_LABEL in spec.labels


def sandbox_spec(key: str, recipe: EnvironmentRecipe, record: dict[str, Any], repo_path: Path,
                 labels: dict[str, str], stop: threading.Event | None = None,
                 network: str | None = None) -> SandboxSpec:
    """The spec of an instance's sandbox on docker, building its image first if need be (a
    build gives up as soon as `stop` is set: see stop_builds)."""
    image = ensure_image(key, recipe, record, repo_path, stop)
    return SandboxSpec(image=image, workdir=TESTBED, network=network or envs.grading_network("docker"),
                       memory="8Gi", cpu=2.0,
                       pids=4096, timeout=4 * 3600, env={**GIT_ENV, **ACTIVE_ENV},
                       mounts=[Mount(source=str(repo_path), target=REPO_MOUNT)],
                       labels={**labels, KEY_LABEL: key})


def _image(client: Any, name: str) -> Any | None:
    import docker.errors

    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def ensure_image(key: str, recipe: EnvironmentRecipe, record: dict[str, Any], repo_path: Path,
                 stop: threading.Event | None = None) -> str:
    """The image of environment `key`; built (from the local build of it) when the engine lacks it."""
    from orchard_cli.env.images import _build_lock, docker_client, ensure_base_image

    client = docker_client()
    tag, wanted = image_tag(key), {KEY_LABEL: key, RECIPE_LABEL: image_recipe()}

    def current() -> bool:
        labels = getattr(_image(client, tag), "labels", None) or {}
        return all(labels.get(k) == v for k, v in wanted.items())

    if current():
        return tag
    with _build_lock(tag):
        if current():
            return tag  # another process built it while we waited
        started = time.monotonic()
        base = ensure_base_image(quiet=True)
        stop = stop or threading.Event()
        marker = _local_build(key, recipe, record, repo_path, stop)
        stale = _image(client, tag)  # an older recipe's image under the same tag
        _build(client, base, tag, key, marker, wanted, stop)
        if stale is not None and stale.id != _image(client, tag).id:
            try:
                client.images.remove(stale.id)
            except Exception:
                pass  # still used by a container: the engine keeps it, untagged
        print(f"orchard: built {tag} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return tag


_BUILDS: dict[Any, threading.Event] = {}  # local managers of builds in progress -> their stop event
_BUILDS_LOCK = threading.Lock()


def stop_builds(stop: threading.Event) -> None:
    """Set `stop` and stop the builds started with it: their build sandboxes are destroyed (the
    local build fails at once), the image build leaves its stream, and none starts anew. For an
    interrupted eval, whose worker threads would otherwise wait for builds of up to an hour
    before the process can exit."""
    stop.set()
    with _BUILDS_LOCK:
        managers = [m for m, event in _BUILDS.items() if event is stop]
    for manager in managers:
        try:
            manager.close()
        except Exception:
            pass


def _local_build(key: str, recipe: EnvironmentRecipe, record: dict[str, Any], repo_path: Path,
                 stop: threading.Event) -> dict[str, Any]:
    """The environment built (or found) by the local backend's machinery, in its own manager."""
    from orchard_cli.env.manager import EnvManager

    if stop.is_set():
        raise EnvironmentUnavailable(f"{key}: not built, the run is stopping")
    try:
        manager = EnvManager("local")
    except Exception as exc:
        raise EnvironmentUnavailable(f"building the environment {key} for docker needs the local "
                                     f"backend (bubblewrap): {exc}") from exc
    with _BUILDS_LOCK:
        _BUILDS[manager] = stop
    try:
        if stop.is_set():  # stopped between the check above and the registration
            raise EnvironmentUnavailable(f"{key}: not built, the run is stopping")
        return envs.ensure_local(manager, key, recipe, record, repo_path)
    finally:
        with _BUILDS_LOCK:
            _BUILDS.pop(manager, None)
        manager.close()


def _build(client: Any, base: str, tag: str, key: str, marker: dict[str, Any],
           labels: dict[str, str], stop: threading.Event) -> None:
    folder = envs.env_dir(key)
    prefix, original = folder / "testbed", str(marker.get("python") or "")
    libs = missing_libraries(client, base, host_libraries(prefix, [prefix, Path(original)]))
    dockerfile = f"FROM {base}\nARG ORIGINAL\n{DOCKERFILE}"
    for line in envs.system_lines(EnvironmentRecipe.model_validate(marker["recipe"])):
        # the recipe's system-wide lines, which the local build skipped, as SWE-bench's images run them
        dockerfile += "RUN " + json.dumps(["/bin/bash", "-c", f"export DEBIAN_FRONTEND=noninteractive; {line}"]) + "\n"
    with tempfile.TemporaryDirectory(prefix="orchard-swe-image-") as tmp:
        context = Path(tmp) / "context.tar"
        with tarfile.open(context, "w") as tar:
            _add_bytes(tar, "Dockerfile", dockerfile.encode())
            _add_bytes(tar, ACTIVATE.lstrip("/"), ACTIVATE_SHIM.encode(), 0o755)
            tar.add(prefix, arcname=ENV_PREFIX.lstrip("/"))
            if (folder / "artifacts.tar").is_file():  # where instance_setup_script unpacks it from
                tar.add(folder / "artifacts.tar", arcname=f"{ENVS_MOUNT.lstrip('/')}/artifacts.tar")
            _add_bytes(tar, "libs/.orchard", b"")  # COPY needs the folder even when empty
            for lib in libs:
                tar.add(os.path.realpath(lib), arcname=f"libs/{Path(lib).name}")
        log: list[str] = []
        try:
            with open(context, "rb") as fh:
                for chunk in client.api.build(fileobj=fh, custom_context=True, tag=tag, rm=True,
                                              forcerm=True, labels=labels, decode=True, pull=False,
                                              buildargs={"ORIGINAL": original}):
                    if stop.is_set():  # closing the stream asks the engine to cancel the build
                        raise EnvironmentUnavailable(f"docker build of {tag} stopped: the run is stopping")
                    log.append(chunk.get("stream") or "")
                    if "error" in chunk:
                        tail = " | ".join(l.strip() for l in "".join(log).splitlines()[-4:] if l.strip())
                        raise EnvironmentUnavailable(f"docker build of {tag} failed: "
                                                     f"{chunk['error'].strip()[:300]} ({tail[-300:]})")
        except EnvironmentUnavailable:
            raise
        except Exception as exc:
            raise EnvironmentUnavailable(f"docker build of {tag} failed: {exc}") from exc


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    import io

    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def elf_files(root: Path) -> list[Path]:
    """Executables and shared objects under `root` (symbolic links left out)."""
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_symlink() or not (".so" in name or os.access(path, os.X_OK)):
                continue
            try:
                with open(path, "rb") as fh:
                    if fh.read(4) == b"\x7fELF":
                        found.append(path)
            except OSError:
                continue
    return found


LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(/\S+)\s+\(0x")


def host_libraries(prefix: Path, own: list[Path]) -> list[str]:
    """The host's shared libraries that ELF files under `prefix` load (ldd), except those in
    the `own` folders (the prefix itself and the interpreter it was copied from)."""
    files = elf_files(prefix)
    owned = tuple(str(p).rstrip("/") + "/" for p in own if str(p) not in ("", "."))
    needed: set[str] = set()
    for start in range(0, len(files), 200):
        batch = [str(f) for f in files[start:start + 200]]
        result = subprocess.run(["ldd", *batch], capture_output=True, text=True,
                                env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
        for line in result.stdout.splitlines():
            match = LDD_LINE.match(line)
            if match and not match.group(2).startswith(owned):
                needed.add(match.group(2))
    return sorted(needed)


def missing_libraries(client: Any, base: str, paths: list[str]) -> list[str]:
    """Those of `paths` that the base image does not have."""
    if not paths:
        return []
    script = 'for f do [ -e "$f" ] || echo "$f"; done'
    out = client.containers.run(base, ["/bin/sh", "-c", script, "sh", *paths], remove=True,
                                network_disabled=True)
    return [line for line in out.decode().splitlines() if line.strip()]
