"""bubblewrap's command line for a local sandbox, and what an image is to the local backend.

The sandbox's root is bwrap's tmpfs holding read-only binds of the image's top-level entries
(so mount points for the workdir and mounts can be made there), remounted read-only at the end;
/proc, /dev, a /tmp and the workdir come from the sandbox's folder. From the 'host' image, /run
(where dockerd's and other daemons' sockets live: a read-only bind does not stop connect()) and
ORCHARD_HOME are left out, and of /sys only the CPU topology is kept (each of /sys's many
submounts costs bwrap time).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import UsageError

SKIP_TOP = {"proc", "dev", "tmp", "sys"}
HOST_HIDDEN = ("/run",)


def image_root(image: str) -> Path:
    if image == "host":
        return Path("/")
    root = Path(image)
    if root.is_absolute() and root.is_dir() and any((root / d).exists() for d in ("bin", "usr")):
        return root
    raise UsageError(
        f"the local backend cannot use image {image!r}",
        hint="use 'host' (this machine's tools, read-only) or the absolute path of a folder "
             "holding a root filesystem; for container images use --backend docker")


def in_image(root: Path, path: str) -> bool:
    return os.path.lexists(str(root).rstrip("/") + path)


def runner_python(root: Path) -> str:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
        if in_image(root, candidate):
            return candidate
    if root == Path("/"):
        return os.path.realpath(sys.executable)
    raise UsageError(f"image {str(root)!r} has no python3, which the local sandbox runner needs",
                     hint="install python3 in the root filesystem (it only needs the standard library)")


def bwrap_argv(bwrap: str, image: Path, folder: Path, spec: SandboxSpec,
               hide: list[Path]) -> list[str]:
    """bwrap's options for one sandbox (the runner's argv goes after them)."""
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if spec.network == "full":
        args.append("--share-net")
    binds = [(spec.workdir, str(folder / "work"), False)]
    binds += [(m.target.rstrip("/") or "/", m.source, m.read_only) for m in spec.mounts]
    hidden = [*HOST_HIDDEN, *_hidden_paths(hide)] if image == Path("/") else []
    args += _image_args(image, [t for t, _, _ in binds] + ["/.orchard"], hidden)
    if image == Path("/"):
        args += ["--dir", "/run"]
    args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    args += ["--proc", "/proc", "--dev", "/dev", "--bind", str(folder / "tmp"), "/tmp"]
    for target, source, read_only in binds:
        args += ["--ro-bind" if read_only else "--bind", source, target]
    args += ["--ro-bind", str(folder / "run"), "/.orchard"]    # the runner's control socket
    return [*args, "--remount-ro", "/", "--chdir", spec.workdir]


def _image_args(image: Path, targets: list[str], hidden: list[str]) -> list[str]:
    """Bind the image read-only, one top-level entry at a time, on bwrap's tmpfs root.

    A folder that must hold a new mount point (a workdir or mount target missing from the image)
    or that holds a hidden path is rebuilt on the tmpfs as well, entry by entry, so bwrap can
    create the mount point there, or leave the hidden path out.
    """
    rebuild = {"/"}
    for target in [*targets, *hidden]:
        if in_image(image, target) != (target in hidden):
            continue    # an existing target is a mount point already; a missing hidden path is hidden
        parts = target.strip("/").split("/")
        for i in range(1, len(parts)):
            folder = "/" + "/".join(parts[:i])
            host = str(image).rstrip("/") + folder
            if os.path.islink(host) or not os.path.isdir(host):
                break
            rebuild.add(folder)
    skip = {*targets, *hidden}
    args: list[str] = []
    prefix = str(image).rstrip("/")

    def emit(folder: str) -> None:
        for name in sorted(os.listdir(prefix + folder)):
            path = folder.rstrip("/") + "/" + name
            if (folder == "/" and name in SKIP_TOP) or path in skip:
                continue
            host = prefix + path
            if os.path.islink(host):
                args.extend(["--symlink", os.readlink(host), path])
            elif path in rebuild:
                args.extend(["--dir", path])
                emit(path)
            else:
                args.extend(["--ro-bind", host, path])

    emit("/")
    return args


def _hidden_paths(paths: list[Path]) -> list[str]:
    """Orchard's own state, hidden from 'host' sandboxes (when /tmp does not hide it already)."""
    found: list[str] = []
    for path in sorted({p.resolve() for p in paths}, key=lambda p: len(p.parts)):
        if len(path.parts) < 2 or path.parts[1] in SKIP_TOP or str(path) in HOST_HIDDEN:
            continue
        if not any(str(path).startswith(f + "/") or str(path) == f for f in found):
            found.append(str(path))
    return found
