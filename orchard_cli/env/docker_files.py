"""Host-side file access for docker sandboxes, refusing symlink escapes.

The sandbox's workspace and /tmp (and its bind mounts) are host folders bound into the container,
so the file API reads and writes them host-side. A path is first resolved with the sandbox's view
of symlinks; every component is then opened with O_NOFOLLOW (and files with O_NONBLOCK, checked to
be regular), so a symlink or FIFO planted in the workspace never leads the host process out of it
or hangs it. A path that leads elsewhere in the container is left to an exec (`locate` -> None).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from orchard_cli.env.models import MAX_FILE_BYTES, check_file_mode, check_file_size
from orchard_cli.errors import NotFoundError, UsageError


class HostTree:
    """Sandbox paths below `roots` (sandbox dir -> host dir), accessed without following links out."""

    def __init__(self, roots: dict[str, Path], read_only: frozenset[str] = frozenset(),
                 owner: tuple[int, int] | None = None) -> None:
        """`owner`: (uid, gid) given to what is created, when the sandbox's user is not root."""
        self.owner = owner
        # Longest first, so /tmp/work (a workdir below /tmp) wins over /tmp.
        self.roots = dict(sorted(roots.items(), key=lambda kv: -len(kv[0])))
        self.read_only = {str(self.roots[r]) for r in read_only}

    def _split(self, path: str) -> tuple[str, list[str]] | None:
        for root in self.roots:
            if path == root or path.startswith(root.rstrip("/") + "/"):
                rest = path[len(root):].strip("/")
                return root, [p for p in rest.split("/") if p]
        return None

    def locate(self, path: str) -> tuple[Path, list[str]] | None:
        """(host root, components) for `path` after resolving symlinks as the sandbox would,
        or None when the path leads outside the host-backed folders."""
        todo = [p for p in path.split("/") if p][::-1]
        current: list[str] = []
        hops = 0
        while todo:
            name = todo.pop()
            if name == ".":
                continue
            if name == "..":
                if current:
                    current.pop()
                continue
            candidate = "/" + "/".join([*current, name])
            where = self._split(candidate)
            if where is None:
                if self._is_prefix(candidate):
                    current.append(name)  # still above the roots: '/home' of '/home/me/work'
                    continue
                return None
            root, parts = where
            host = self.roots[root].joinpath(*parts)
            try:
                is_link = stat.S_ISLNK(os.lstat(host).st_mode)
            except OSError:
                is_link = False
            if is_link:
                hops += 1
                if hops > 40:
                    raise UsageError(f"too many levels of symbolic links in {path!r}")
                target = os.readlink(host)
                if target.startswith("/"):
                    current = []
                todo.extend([p for p in target.split("/") if p][::-1])
                continue
            current.append(name)
        where = self._split("/" + "/".join(current))
        if where is None:
            return None
        return self.roots[where[0]], where[1]

    def _is_prefix(self, candidate: str) -> bool:
        return any(root.startswith(candidate.rstrip("/") + "/") for root in self.roots)

    def _open_dir(self, root: Path, parts: list[str], create: bool) -> int:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts:
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                        if self.owner:
                            os.chown(part, *self.owner, dir_fd=fd, follow_symlinks=False)
                    except FileExistsError:
                        pass
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read(self, root: Path, parts: list[str], shown: str) -> bytes:
        if not parts:
            raise UsageError(f"{shown} is a directory")
        try:
            dfd = self._open_dir(root, parts[:-1], create=False)
            try:  # O_NONBLOCK: a FIFO planted in the workspace must not hang us
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=dfd)
            finally:
                os.close(dfd)
        except FileNotFoundError as exc:
            raise NotFoundError(f"no file {shown!r} in the sandbox") from exc
        except OSError as exc:
            raise self._refuse(exc, shown) from exc
        with os.fdopen(fd, "rb") as fh:
            kind = os.fstat(fh.fileno()).st_mode
            if not stat.S_ISREG(kind):
                raise UsageError(f"{shown} is {'a directory' if stat.S_ISDIR(kind) else 'not a regular file'}")
            check_file_size(os.fstat(fh.fileno()).st_size, repr(shown))
            data = fh.read(MAX_FILE_BYTES + 1)  # a file growing meanwhile stops at the limit
            check_file_size(len(data), repr(shown))
            return data

    def write(self, root: Path, parts: list[str], data: bytes, mode: int, shown: str) -> None:
        check_file_mode(mode)
        check_file_size(len(data), repr(shown))
        if not parts:
            raise UsageError(f"{shown} is a directory")
        if str(root) in self.read_only:
            raise UsageError(f"{shown!r} is on a read-only mount")
        try:
            dfd = self._open_dir(root, parts[:-1], create=True)
            try:
                fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, mode, dir_fd=dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise self._refuse(exc, shown) from exc
        with os.fdopen(fd, "wb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(f"{shown!r} is not a regular file")
            os.ftruncate(fd, 0)
            fh.write(data)
            os.fchmod(fh.fileno(), mode)
            if self.owner:
                os.fchown(fh.fileno(), *self.owner)

    @staticmethod
    def _refuse(exc: OSError, shown: str) -> UsageError:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link swapped in under us
            return UsageError(f"{shown!r} crosses a symbolic link or a non-directory")
        if exc.errno == errno.EISDIR:
            return UsageError(f"{shown} is a directory")
        return UsageError(f"cannot access {shown!r}: {exc.strerror}")
