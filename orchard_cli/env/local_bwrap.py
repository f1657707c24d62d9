"""bubblewrap's command line for a local sandbox, and what an image is to the local backend.

The sandbox's root is bwrap's tmpfs holding read-only binds of the image's top-level entries
(so mount points for the workdir and mounts can be made there), remounted read-only at the end;
/proc, /dev, a /tmp and the workdir come from the sandbox's folder. Of /sys only the CPU topology
is kept (each of /sys's many submounts costs bwrap time).

The 'host' image shows only what programs need: the system folders (`HOST_SHOWN`: /usr, /etc,
/opt and the /bin, /lib links), never /root, /home, /var (/var/tmp is the sandbox's /tmp), /srv,
/run (daemons' sockets: a read-only bind does not stop connect()) or any other folder of the host; ORCHARD_HOME is left out
wherever it is. Entries of /etc and /opt that not everyone may read (/etc/shadow, private keys)
are covered by an empty file or folder. The task's tree and the harnesses come in as mounts.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import UsageError

SKIP_TOP = {"proc", "dev", "tmp", "sys"}
HOST_HIDDEN = ("/run",)
HOST_SHOWN = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt"})
PRIVATE_SCAN = ("/etc", "/opt")
PRIVATE_TTL = 10.0
_private: tuple[float, tuple[list[str], list[str]]] | None = None


def image_root(image: str) -> Path:
    """'host' is this machine's system folders; an absolute folder holding a root filesystem is
    itself; an image name goes through `local_images.resolve` (an alias, or the docker engine's
    copy of it)."""
    if image == "host":
        return Path("/")
    root = Path(image)
    if root.is_absolute():
        if root.is_dir() and any((root / d).exists() for d in ("bin", "usr")):
            return root
        raise UsageError(f"the local backend cannot use image {image!r}: not a folder holding a root filesystem",
                         hint="use 'host', a root filesystem folder, or an image name the docker engine has")
    from orchard_cli.env.local_images import resolve

    return image_root(resolve(image))


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
    host = image == Path("/")
    hidden = [*HOST_HIDDEN, *_hidden_paths(hide)] if host else []
    args += _image_args(image, [t for t, _, _ in binds] + ["/.orchard"], hidden,
                        HOST_SHOWN if host else None)
    if host:
        args += ["--dir", "/run", "--dir", "/var", "--symlink", "../tmp", "/var/tmp"]
        files, folders = private_paths()
        args += [a for path in files for a in ("--ro-bind", "/dev/null", path)]
        args += [a for path in folders for a in ("--tmpfs", path, "--remount-ro", path)]
    args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    args += ["--proc", "/proc", "--dev", "/dev", "--bind", str(folder / "tmp"), "/tmp"]
    for target, source, read_only in binds:
        args += ["--ro-bind" if read_only else "--bind", source, target]
    args += ["--ro-bind", str(folder / "run"), "/.orchard"]    # the runner's control socket
    return [*args, "--remount-ro", "/", "--chdir", spec.workdir]


def private_paths() -> tuple[list[str], list[str]]:
    """(files, folders) under PRIVATE_SCAN that not everyone may read: the host's secrets in the
    system folders a 'host' sandbox sees. Found again after PRIVATE_TTL seconds (/etc takes ~70 ms)."""
    global _private
    now = time.monotonic()
    if _private is not None and now - _private[0] < PRIVATE_TTL:
        return _private[1]
    files: list[str] = []
    folders: list[str] = []
    for top in PRIVATE_SCAN:
        try:
            device = os.stat(top).st_dev
        except OSError:
            continue
        stack = [top]
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except OSError:
                continue
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if st.st_mode & 0o005 != 0o005:
                        folders.append(entry.path)
                    elif st.st_dev == device:
                        stack.append(entry.path)
                elif stat.S_ISREG(st.st_mode) and not st.st_mode & 0o004:
                    files.append(entry.path)
    _private = (now, (sorted(files), sorted(folders)))
    return _private[1]


def _visible(image: Path, path: str, shown: frozenset[str] | None) -> bool:
    top = path.strip("/").split("/")[0]
    return in_image(image, path) and (shown is None or top in shown)


def _image_args(image: Path, targets: list[str], hidden: list[str],
                shown: frozenset[str] | None = None) -> list[str]:
    """Bind the image read-only, one top-level entry at a time, on bwrap's tmpfs root (only the
    top-level entries named in `shown`, when given).

    A folder that must hold a new mount point (a workdir or mount target missing from the image)
    or that holds a hidden path is rebuilt on the tmpfs as well, entry by entry, so bwrap can
    create the mount point there, or leave the hidden path out.
    """
    rebuild = {"/"}
    for target in [*targets, *hidden]:
        if _visible(image, target, shown) != (target in hidden):
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
            if (folder == "/" and (name in SKIP_TOP or (shown is not None and name not in shown))) \
                    or path in skip:
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
