"""Container images built locally: no registry is needed.

The base image (`orchard/base:bookworm`) is a minimal Debian root filesystem made by debootstrap
and `docker import`ed. The engine is the cache: the image carries a label with the recipe's hash,
so it is built once per machine and again only when the recipe changes. A lock file keeps two
processes from building it at the same time. Per-task images are built `FROM` it
(`build_image`).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from orchard_cli.errors import InfraError, UsageError

BASE_IMAGE = "orchard/base:bookworm"
RECIPE_LABEL = "orchard.recipe"
SUITE = "bookworm"
PACKAGES = ("python3", "git", "patch", "bash", "ca-certificates", "procps")
# Dropped from the root filesystem before import: caches and documentation, ~40% of minbase.
PRUNE = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
         "usr/share/info", "usr/share/locale", "var/log")
IMAGE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/bash"]',
)
RECIPE_VERSION = 1


def recipe_hash() -> str:
    """Changes whenever anything that shapes the base image changes."""
    text = repr((RECIPE_VERSION, SUITE, PACKAGES, PRUNE, IMAGE_CHANGES))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def docker_client():
    """A docker SDK client for the local engine, or a clear error naming the fix."""
    try:
        import docker
    except ImportError as exc:
        from orchard_cli.errors import MissingDependencyError

        raise MissingDependencyError("the docker backend needs the docker SDK",
                                     hint="pip install 'orchard-cli[docker]'") from exc
    try:
        client = docker.from_env(timeout=600)
        if client.api.base_url.startswith("http+docker://"):  # a Unix socket: no proxy applies,
            client.api.trust_env = False  # so requests need not read the environment for one
        client.ping()
    except Exception as exc:
        raise InfraError(f"no Docker engine answers: {exc}",
                         hint="start it with scripts/start-dockerd.sh (or `dockerd &`)") from exc
    return client


def _image_labels(client, name: str) -> dict[str, str] | None:
    import docker.errors

    try:
        image = client.images.get(name)
    except docker.errors.ImageNotFound:
        return None
    return (image.attrs.get("Config") or {}).get("Labels") or {}


@contextmanager
def _build_lock(name: str) -> Iterator[None]:
    """Machine-wide (not per ORCHARD_HOME): tests give each process its own home."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    path = Path(tempfile.gettempdir()) / f"orchard-image-{safe}.lock"
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _mirror() -> str:
    """ORCHARD_DEBIAN_MIRROR, else the first Debian mirror apt is configured with."""
    if os.environ.get("ORCHARD_DEBIAN_MIRROR"):
        return os.environ["ORCHARD_DEBIAN_MIRROR"]
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in sources:
        try:
            text = source.read_text()
        except OSError:
            continue
        for match in re.finditer(r"(https?://\S+/debian)/?(?:\s|$)", text):
            return match.group(1)
    return "http://deb.debian.org/debian"


def ensure_base_image(name: str = BASE_IMAGE, *, quiet: bool = False) -> str:
    """Return `name`, building it first when the engine lacks it or holds an older recipe."""
    client = docker_client()
    wanted = recipe_hash()
    if (_image_labels(client, name) or {}).get(RECIPE_LABEL) == wanted:
        return name
    with _build_lock(name):
        if (_image_labels(client, name) or {}).get(RECIPE_LABEL) == wanted:
            return name  # another process built it while we waited
        started = time.monotonic()
        _build_base(client, name, wanted, quiet=quiet)
        if not quiet:
            print(f"orchard: built {name} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return name


def _build_base(client, name: str, recipe: str, *, quiet: bool) -> None:
    if not shutil.which("debootstrap"):
        raise InfraError("building the base image needs debootstrap",
                         hint="apt-get install -y debootstrap")
    if os.geteuid() != 0:
        raise InfraError("building the base image runs debootstrap, which needs root",
                         hint="run `orchard env image build` once as root (sudo)")
    with tempfile.TemporaryDirectory(prefix="orchard-rootfs-") as tmp:
        root = Path(tmp) / "root"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
               SUITE, str(root), _mirror()]
        if not quiet:
            print(f"orchard: building {name}: {' '.join(cmd)}", file=sys.stderr)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            tail = " | ".join(proc.stdout.strip().splitlines()[-3:]) or "no output"
            raise InfraError(f"debootstrap failed (exit {proc.returncode}): {tail}",
                             hint="check the Debian mirror (ORCHARD_DEBIAN_MIRROR overrides it)")
        for rel in PRUNE:
            target = root / rel
            if target.is_dir():
                for child in target.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
        tar_path = Path(tmp) / "rootfs.tar"
        packed = subprocess.run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf",
                                 str(tar_path), "."], stderr=subprocess.PIPE, text=True)
        if packed.returncode != 0:
            raise InfraError(f"packing the root filesystem failed: {packed.stderr.strip()[-300:]}")
        repo, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "latest")
        changes = [*IMAGE_CHANGES, f"LABEL {RECIPE_LABEL}={recipe}"]
        try:
            client.api.import_image_from_file(str(tar_path), repository=repo, tag=tag, changes=changes)
        except Exception as exc:
            raise InfraError(f"docker import of {name} failed: {exc}") from exc
    if (_image_labels(client, name) or {}).get(RECIPE_LABEL) != recipe:
        raise InfraError(f"docker import did not produce {name} with recipe {recipe}")


def build_image(dockerfile: str, tag: str, files: dict[str, bytes] | None = None,
                labels: dict[str, str] | None = None) -> str:
    """`docker build` from Dockerfile text plus a few context files; never pulls a base that is
    already local. Returns the tag. Build failures raise UsageError with the build's last lines."""
    client = docker_client()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data in {"Dockerfile": dockerfile.encode(), **(files or {})}.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    log: list[str] = []
    try:
        for chunk in client.api.build(fileobj=buf, custom_context=True, tag=tag, rm=True,
                                      forcerm=True, labels=labels, decode=True):
            if "stream" in chunk:
                log.append(chunk["stream"])
            if "error" in chunk:
                tail = "".join(log[-5:]).strip()
                raise UsageError(f"docker build of {tag} failed: {chunk['error'].strip()}",
                                 hint=tail[-500:] or None)
    except UsageError:
        raise
    except Exception as exc:
        raise InfraError(f"docker build of {tag} failed: {exc}") from exc
    return tag


def build_image_from(base: str, dockerfile_text: str, tag: str, **kw) -> str:
    """Build `tag` from Dockerfile lines that come after `FROM base`."""
    return build_image(f"FROM {base}\n{dockerfile_text}", tag, **kw)


if __name__ == "__main__":  # python -m orchard_cli.env.images [NAME]: build the base image now
    print(ensure_base_image(sys.argv[1] if len(sys.argv) > 1 else BASE_IMAGE))
