"""The file API of a local sandbox, done host-side on its folders, refusing symlink escapes.

A sandbox path (already normalised by the manager to lie under the workdir or /tmp) is first
resolved in the sandbox's own path space: each symlink met is followed as the sandbox would follow
it (absolute targets from the sandbox's root), and the result must still lie in an *area* (the
workdir, /tmp, or a spec mount). The host file is then opened one component at a time with
O_NOFOLLOW from the area's folder, so a symlink swapped in meanwhile fails instead of escaping.
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

from orchard_cli.env.models import MAX_FILE_BYTES, SandboxSpec, check_file_mode, check_file_size
from orchard_cli.errors import NotFoundError, PathEscapeError, UsageError

MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SandboxFiles:
    def __init__(self, spec: SandboxSpec, work: Path, tmp: Path) -> None:
        areas = [(spec.workdir, str(work), True), ("/tmp", str(tmp), True)]
        areas += [(m.target.rstrip("/") or "/", m.source, not m.read_only) for m in spec.mounts]
        self.areas = sorted(areas, key=lambda a: len(a[0]), reverse=True)

    def _area(self, path: str) -> tuple[str, str, bool] | None:
        for area in self.areas:
            if path == area[0] or path.startswith(area[0] + "/"):
                return area
        return None

    def host_path(self, path: str) -> Path:
        """Where a sandbox path lives on the host (no symlink checks: for cwd mapping only)."""
        area = self._area(path)
        if area is None:
            raise PathEscapeError(f"path {path!r} is outside the sandbox's folders")
        return Path(area[1] + path[len(area[0]):])

    def _canonical(self, path: str) -> str:
        """Resolve symlinks in the sandbox's path space; refuse any that lead out of the areas."""
        parts = [p for p in path.split("/") if p]
        done, hops = "/", 0
        while parts:
            candidate = posixpath.join(done, parts.pop(0))
            area = self._area(candidate)
            host = area[1] + candidate[len(area[0]):] if area else None
            if host is not None and os.path.islink(host):
                hops += 1
                if hops > MAX_LINKS:
                    raise PathEscapeError(f"path {path!r} has too many levels of symlinks")
                target = posixpath.normpath(posixpath.join(done, os.readlink(host)))
                parts = [p for p in target.split("/") if p] + parts
                done = "/"
            else:
                done = candidate
        if self._area(done) is None:
            raise PathEscapeError(f"path {path!r} leads outside the sandbox through a symlink",
                                  hint="only the workdir and /tmp are reachable by the file API")
        return done

    def _open_parent(self, path: str, create: bool) -> tuple[int, str, bool]:
        """(fd of the parent folder, final name, writable) without following any symlink."""
        canonical = self._canonical(path)
        target, host_root, writable = self._area(canonical)
        rel = [p for p in canonical[len(target):].split("/") if p]
        if not rel:
            raise UsageError(f"{path!r} is a directory")
        fd = os.open(host_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in rel[:-1]:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise NotFoundError(f"no file {path!r} in the sandbox") from None
                    if not writable:
                        raise UsageError(f"{path!r} is on a read-only mount") from None
                    os.mkdir(part, 0o755, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except (NotADirectoryError, OSError) as exc:
                    raise PathEscapeError(f"cannot traverse {path!r}: {exc.strerror}") from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd, rel[-1], writable

    def write(self, path: str, data: bytes, mode: int = 0o644) -> None:
        check_file_mode(mode)
        check_file_size(len(data), repr(path))
        parent, name, writable = self._open_parent(path, create=True)
        try:
            if not writable:
                raise UsageError(f"{path!r} is on a read-only mount")
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, mode, dir_fd=parent)
            except IsADirectoryError:
                raise UsageError(f"{path!r} is a directory") from None
            except OSError as exc:
                raise PathEscapeError(f"cannot write {path!r}: {exc.strerror}") from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise UsageError(f"{path!r} is not a regular file")
            with os.fdopen(fd, "wb") as fh:
                os.ftruncate(fd, 0)
                fh.write(data)
                os.fchmod(fh.fileno(), mode)
        finally:
            os.close(parent)

    def read(self, path: str) -> bytes:
        parent, name, _ = self._open_parent(path, create=False)
        try:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=parent)
            except FileNotFoundError:
                raise NotFoundError(f"no file {path!r} in the sandbox") from None
            except OSError as exc:
                raise PathEscapeError(f"cannot read {path!r}: {exc.strerror}") from None
            kind = os.fstat(fd).st_mode
            if not stat.S_ISREG(kind):
                os.close(fd)
                what = "a directory" if stat.S_ISDIR(kind) else "not a regular file"
                raise UsageError(f"{path!r} is {what}")
            with os.fdopen(fd, "rb") as fh:
                check_file_size(os.fstat(fh.fileno()).st_size, repr(path))
                data = fh.read(MAX_FILE_BYTES + 1)  # a file growing meanwhile stops at the limit
                check_file_size(len(data), repr(path))
                return data
        finally:
            os.close(parent)
