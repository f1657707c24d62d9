"""Docker-style image names on the local backend.

The local backend runs a root filesystem folder under bubblewrap. An image *name* (what the
published SDK's examples ask for: `python:3.11-slim`, `ubuntu:22.04`) is found, in this order:

1. `ORCHARD_LOCAL_IMAGES`: `NAME=host` or `NAME=/path/to/rootfs`, comma-separated (an alias to
   this machine's system folders, or to a folder holding a root filesystem);
2. the local docker engine, when it holds the image: its root filesystem is exported once
   (`docker create` + `docker export`, no registry) into ORCHARD_HOME/images/<image id>/rootfs and
   run from there;
3. otherwise one line says which image, why, and what the local backend can run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from orchard_cli.errors import UsageError
from orchard_cli.home import state_dir

ALIASES_ENV = "ORCHARD_LOCAL_IMAGES"
EXPORT_TIMEOUT = 900


def aliases() -> dict[str, str]:
    """NAME -> 'host' or a folder, from ORCHARD_LOCAL_IMAGES."""
    found = {}
    for item in (os.environ.get(ALIASES_ENV) or "").split(","):
        name, sep, target = item.strip().rpartition("=")
        if sep and name and target:
            found[name.strip()] = target.strip()
    return found


def resolve(image: str) -> str:
    """'host', or the folder of a root filesystem, for an image name; a one-line UsageError when
    the name means nothing here."""
    target = aliases().get(image)
    if target is not None:
        return target
    exported = from_engine(image)
    if exported is not None:
        return str(exported)
    raise UsageError(
        f"the local backend cannot run image {image!r}: it is not 'host', not a folder holding a root "
        f"filesystem, not named in {ALIASES_ENV}, and no local docker engine holds it",
        hint=f"set {ALIASES_ENV}='{image}=host' (this machine's tools) or '{image}=/path/to/rootfs', "
             "load the image into docker, or use --backend docker")


def _docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def from_engine(image: str) -> Path | None:
    """The root filesystem of `image` as the local docker engine holds it, exported once (None when
    there is no engine or it lacks the image)."""
    if not shutil.which("docker"):
        return None
    try:
        found = _docker("image", "inspect", "--format", "{{.Id}}", image)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if found.returncode != 0 or not found.stdout.strip():
        return None
    image_id = found.stdout.strip().removeprefix("sha256:")[:24]
    folder = state_dir("images") / image_id
    rootfs = folder / "rootfs"
    if (folder / ".done").is_file():
        return rootfs
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / ".done").is_file():
            return rootfs
        _export(image, folder, rootfs)
    return rootfs


def _export(image: str, folder: Path, rootfs: Path) -> None:
    partial = folder / "rootfs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    created = _docker("create", image, "/bin/true")
    if created.returncode != 0:
        raise UsageError(f"cannot read image {image!r} from the docker engine: {created.stderr.strip()[-300:]}")
    container = created.stdout.strip()
    try:
        exporter = subprocess.Popen(["docker", "export", container], stdout=subprocess.PIPE)
        unpack = subprocess.run(["tar", "-x", "--numeric-owner", "-C", str(partial)], stdin=exporter.stdout,
                                capture_output=True, timeout=EXPORT_TIMEOUT)
        exporter.wait(EXPORT_TIMEOUT)
        if exporter.returncode != 0 or unpack.returncode != 0:
            raise UsageError(f"cannot export image {image!r}: {unpack.stderr.decode(errors='replace')[-300:]}")
    finally:
        _docker("rm", "-f", container)
    shutil.rmtree(rootfs, ignore_errors=True)
    partial.rename(rootfs)
    (folder / "image").write_text(image + "\n")
    (folder / ".done").write_text("")
