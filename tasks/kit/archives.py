"""Archives a dataset comes in (an sdist, a packed task suite), checked entry by entry before
anything is written (taskfiles.unpack_archive is the way in; a refusal is paths.Refused).

    name       relative, no `..`, no NUL
    kind       files, folders and links; a device or FIFO is refused
    links      a symbolic link's target, and a hard link's, must resolve inside the destination
    size       the entries' sizes added up: at most the limit (a small archive that unpacks to
               terabytes is refused unread)
"""

from __future__ import annotations

import posixpath
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from orchard_cli.tasks.kit.paths import Refused


def _name(name: str) -> str:
    clean = name.replace("\\", "/")
    if not clean or "\0" in clean:
        raise Refused(repr(name), "not a path")
    if clean.startswith("/") or PurePosixPath(clean).is_absolute() or (len(clean) > 1 and clean[1] == ":"):
        raise Refused(name, "an absolute path")
    if ".." in PurePosixPath(clean).parts:
        raise Refused(name, "a path with '..'")
    return clean


def _link(name: str, target: str, hard: bool) -> None:
    if target.startswith("/"):
        raise Refused(name, f"a link to the absolute path {target}")
    base = "" if hard else posixpath.dirname(name)
    where = posixpath.normpath(posixpath.join(base, target))
    if where == ".." or where.startswith("../"):
        raise Refused(name, f"a link to {target}, outside the archive")


def entries(archive: Path, *, limit: int, count: int) -> list[str]:
    """The archive's entry names, each checked; a refusal raises `Refused`."""
    total, names = 0, []
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                names.append(_name(info.filename))
                total += info.file_size
                if total > limit:
                    raise Refused(info.filename, f"the archive unpacks to more than {limit:,} bytes")
                if len(names) > count:
                    raise Refused(info.filename, f"the archive holds more than {count:,} entries")
        return names
    with tarfile.open(archive) as tf:
        for member in tf:
            names.append(_name(member.name))
            if member.issym() or member.islnk():
                _link(member.name, member.linkname, member.islnk())
            elif not (member.isfile() or member.isdir()):
                raise Refused(member.name, "a device or FIFO (special files are refused)")
            total += member.size
            if total > limit:
                raise Refused(member.name, f"the archive unpacks to more than {limit:,} bytes")
            if len(names) > count:
                raise Refused(member.name, f"the archive holds more than {count:,} entries")
    return names


def extract(archive: Path, dest: Path, names: list[str]) -> None:
    """Unpack a checked archive into `dest` (tar: also through tarfile's 'data' filter)."""
    dest.mkdir(parents=True, exist_ok=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest)
        return
    with tarfile.open(archive) as tf:
        try:
            tf.extractall(dest, filter="data")
        except tarfile.FilterError as exc:
            raise Refused(getattr(getattr(exc, "tarinfo", None), "name", "?"), str(exc)) from None
