"""The guard on a task's files, in the standard library alone: Claw-Eval's `helper.py`, which runs
in a checkout's own environment, loads this file by its path and applies the same rules as
orchard (taskfiles.py is the orchard side: one-line usage errors naming the task).

Task data comes from elsewhere (a downloaded checkout, a shared suite), and orchard reads it on the
host as the user who runs it. So a path a task names, and every file under a folder it names, is:

    inside its roots   resolved with `..` and symbolic links, it must stay inside the task folder
                       (or a further root, where the benchmark's own runner looks there too: a
                       Claw-Eval checkout's root); a link that stays inside works
    relative           an absolute path is refused
    a regular file     a FIFO, socket or device is refused before it is opened
    capped             FILE_LIMIT bytes a file (by its size on disk, before reading: a sparse file
                       is refused unread), TREE_LIMIT bytes and TREE_FILES files a folder

A refusal raises `Refused(path, why)`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable, Sequence

FILE_LIMIT = 256 << 20
"""Bytes a task file may hold (a fixture video of a multimodal task fits; a 2 GB file does not)."""
TREE_LIMIT = 1 << 30
"""Bytes all the files under one folder a task names may hold together."""
TREE_FILES = 20_000
"""Files under one folder a task names."""


class Refused(ValueError):
    """A task's path that orchard does not read: `path` as the task names it, `why` in words."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _mb(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MiB" if size >= 1 << 20 else f"{size:,} bytes"


def _roots(roots: Sequence[str | os.PathLike]) -> list[str]:
    if not roots:
        raise ValueError("a guarded path needs at least one root")
    return [os.path.realpath(r) for r in roots]


def _where(real: str, what: str, roots: list[str]) -> str:
    places = " or ".join(roots)
    return f"{what} leads to {real}, outside {places}"


def locate(rel: str, roots: Sequence[str | os.PathLike]) -> Path:
    """The real path of `rel`, looked up under each root in turn (the first that holds it wins;
    a path none holds: its place under the first root). Its real path must lie inside one of the
    roots; a `..` or a symbolic link that leaves them is refused, as is an absolute path."""
    text = os.fspath(rel)
    if not text.strip() or "\0" in text:
        raise Refused(repr(text), "not a path")
    if os.path.isabs(text):
        raise Refused(text, "an absolute path (a task names its files relative to its folder)")
    bases = _roots(roots)
    for base in bases:
        place = os.path.join(base, text)
        if os.path.lexists(place):
            real = os.path.realpath(place)
            if not any(_inside(real, b) for b in bases):
                dots = not any(_inside(os.path.normpath(place), b) for b in bases)
                raise Refused(text, _where(real, "its '..'" if dots else "a symbolic link on it", bases))
            return Path(real)
    place = os.path.normpath(os.path.join(bases[0], text))
    if not any(_inside(place, b) for b in bases):
        raise Refused(text, _where(place, "its '..'", bases))
    return Path(place)


def check_file(path: Path, name: str, limit: int = FILE_LIMIT) -> os.stat_result:
    """The file's stat, when it is a regular file within `limit` bytes (nothing is opened)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise Refused(name, f"cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise Refused(name, f"is {_kind(info.st_mode)}, not a file (special files are refused)")
    if info.st_size > limit:
        raise Refused(name, f"holds {_mb(info.st_size)}, over the {_mb(limit)} a task file may hold")
    return info


def read(path: Path, name: str, limit: int = FILE_LIMIT) -> bytes:
    """The bytes of a located file: checked before it is opened, opened without following a link
    or waiting on a FIFO, and read no further than `limit` (a file that grew is refused)."""
    before = check_file(path, name, limit)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise Refused(name, f"cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(info.st_mode):
            raise Refused(name, "changed while it was read")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise Refused(name, f"holds more than the {_mb(limit)} a task file may hold")
    return data


def tree(rel: str, roots: Sequence[str | os.PathLike], *, limit: int = FILE_LIMIT, total: int = TREE_LIMIT,
         files: int = TREE_FILES) -> list[tuple[str, Path]]:
    """(path as the task would name it, real path) of every file under the folder `rel` (itself,
    when it names a file), sorted; links followed only while they stay inside the roots, each file
    checked as `check_file` checks it, the sum within `total` bytes and `files` files."""
    bases = _roots(roots)
    start = locate(rel, roots)
    if not os.path.lexists(start):
        raise Refused(rel, "is not there")
    if not os.path.isdir(start):
        check_file(start, rel, limit)
        return [(rel, start)]
    found: list[tuple[str, Path]] = []
    size = 0

    def walk(folder: str, shown: str, ancestors: tuple[str, ...]) -> None:
        nonlocal size
        with os.scandir(folder) as entries:
            names = sorted(entries, key=lambda e: e.name)
        for entry in names:
            name = f"{shown}/{entry.name}" if shown else entry.name
            real = os.path.realpath(entry.path)
            if entry.is_symlink() and not any(_inside(real, b) for b in bases):
                raise Refused(name, _where(real, "a symbolic link", bases))
            try:
                mode = os.stat(real).st_mode
            except OSError as exc:
                raise Refused(name, f"cannot be read ({exc.strerror})") from None
            if stat.S_ISDIR(mode):
                if real in ancestors:
                    raise Refused(name, "a symbolic link to a folder that holds it (a loop)")
                walk(real, name, (*ancestors, real))
                continue
            info = check_file(Path(real), name, limit)
            size += info.st_size
            if size > total:
                raise Refused(rel, f"holds more than the {_mb(total)} a task folder may hold")
            found.append((name, Path(real)))
            if len(found) > files:
                raise Refused(rel, f"holds more than the {files:,} files a task folder may hold")

    shown = os.path.normpath(rel)
    walk(str(start), "" if shown == "." else shown, (str(start),))
    return found


def check_all(names: Iterable[str], roots: Sequence[str | os.PathLike]) -> list[str]:
    """Every name located and, where it exists, checked (files and folders alike); the names
    none of the roots holds, in order (a refusal raises)."""
    missing = []
    for name in names:
        place = locate(name, roots)
        if os.path.lexists(place):
            tree(name, roots)
        else:
            missing.append(name)
    return missing
