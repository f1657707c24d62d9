"""The one way a family reads task data it did not make: a task folder, a checkout, a data file,
an archive a dataset comes in (docs/tasks.md, "Task data from elsewhere").

The rules are paths.py's (standard library only, so Claw-Eval's helper applies the same ones in
the checkout's environment): every path a task names, and every file under a folder it names,
resolves inside the task's folder (or a further root where the benchmark's own runner looks too),
symbolic links only while they stay inside, no FIFOs, sockets or devices, sizes capped. A refusal
is a `TaskDataError` (a usage error: exit 2 when `tasks validate` or `eval` loads the suite,
before any episode runs) of one line naming the task and the path.

    TaskFiles(task, folder, also=(...))   a task's files: locate, exists, read_bytes, read_text,
                                          files (a folder's files: build contexts, fixtures),
                                          read_tree, check
    task_folders(root)                    the task folders of a suite folder (none linked out)
    read_data_file(path)                  a data file the user names (JSONL, JSON)
    ParsedTasks                           a family's parsed task files by task id (claw, web)
    unpack_archive(archive, dest)         every entry checked before any is written
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from orchard_cli.errors import UsageError
from orchard_cli.tasks.kit.paths import FILE_LIMIT, TREE_FILES, TREE_LIMIT, Refused, locate, read, tree

HINT = "a task's files must stay inside its folder: copy a file in rather than link to it"
DATA_LIMIT = FILE_LIMIT
"""Bytes a data file the user names may hold."""
ARCHIVE_LIMIT = 2 << 30
"""Bytes an archive may unpack to (its entries' sizes added up before anything is written)."""
ARCHIVE_ENTRIES = 100_000


class TaskDataError(UsageError):
    """Task data orchard refuses to read: one line naming the task and the path."""


class TaskFiles:
    """One task's files, under `folder` (and `also`: further roots its benchmark's runner falls
    back to, in order, such as a Claw-Eval checkout's root)."""

    def __init__(self, task: str, folder: str | os.PathLike, *, also: Sequence[str | os.PathLike] = ()) -> None:
        self.task = task
        self.roots = [Path(folder), *(Path(a) for a in also)]

    def refusal(self, exc: Refused) -> TaskDataError:
        return TaskDataError(f"task {self.task}: {exc}", hint=HINT)

    def locate(self, rel: str) -> Path:
        """The real path of `rel` (it need not exist)."""
        try:
            return locate(rel, self.roots)
        except Refused as exc:
            raise self.refusal(exc) from None

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.locate(rel))

    def is_dir(self, rel: str) -> bool:
        return os.path.isdir(self.locate(rel))

    def read_bytes(self, rel: str, limit: int = FILE_LIMIT) -> bytes:
        try:
            return read(locate(rel, self.roots), rel, limit)
        except Refused as exc:
            raise self.refusal(exc) from None

    def read_text(self, rel: str, limit: int = FILE_LIMIT) -> str:
        data = self.read_bytes(rel, limit)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TaskDataError(f"task {self.task}: {rel}: not UTF-8 text (byte {exc.start})") from None

    def files(self, rel: str = ".", *, limit: int = FILE_LIMIT, total: int = TREE_LIMIT,
              count: int = TREE_FILES) -> list[tuple[str, Path]]:
        """(name, real path) of every file under the folder `rel` (or the file itself), checked;
        names are relative to the task folder, as the task would write them."""
        try:
            return tree(rel, self.roots, limit=limit, total=total, files=count)
        except Refused as exc:
            raise self.refusal(exc) from None

    def read_tree(self, rel: str = ".", *, limit: int = FILE_LIMIT, total: int = TREE_LIMIT) -> dict[str, bytes]:
        """name -> bytes of every file under `rel` (a build context, a fixtures folder)."""
        found: dict[str, bytes] = {}
        for name, path in self.files(rel, limit=limit, total=total):
            try:
                found[name] = read(path, name, limit)
            except Refused as exc:
                raise self.refusal(exc) from None
        return found

    def check(self, names: Iterable[str]) -> list[str]:
        """Every name checked (located; files and folders that exist walked, nothing read); the
        names none of the roots holds, in order."""
        missing = []
        for name in names:
            if self.exists(name):
                self.files(name)
            else:
                missing.append(name)
        return missing


def task_folders(root: str | os.PathLike, marker: str = "task.yaml") -> list[Path]:
    """The task folders of a suite folder: `root` itself when it holds `marker`, else each folder
    in it that holds one, sorted; a folder linked to a place outside `root` is refused."""
    root = Path(root)
    if os.path.lexists(root / marker):
        return [root]
    base = os.path.realpath(root)
    found = []
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if not entry.is_dir() or not os.path.lexists(os.path.join(entry.path, marker)):
                continue
            if entry.is_symlink():
                try:
                    locate(entry.name, [base])
                except Refused as exc:
                    raise TaskFiles(entry.name, root).refusal(exc) from None
            found.append(root / entry.name)
    return found


def read_data_file(path: str | os.PathLike, limit: int = DATA_LIMIT) -> str:
    """The text of a data file the user names: a regular UTF-8 file within `limit` bytes; a link
    is followed only to a place inside the folder that holds it (a dataset's own link)."""
    path = Path(path).expanduser()
    try:
        data = read(locate(path.name, [path.parent]), path.name, limit)
    except Refused as exc:
        raise TaskDataError(f"data file {path.parent / exc.path}: {exc.why}",
                            hint="name the file itself, not a link that leads out of its folder") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskDataError(f"{path} is not a text data file (byte {exc.start} is not UTF-8)") from None


def unpack_archive(archive: Path, dest: Path, *, limit: int = ARCHIVE_LIMIT) -> None:
    """Unpack a .zip or a tar archive (any compression) into `dest`, after checking every entry:
    no absolute path or `..`, no link leading outside `dest`, no device or FIFO, at most `limit`
    bytes and ARCHIVE_ENTRIES entries in all. Nothing is written when one entry is refused."""
    from orchard_cli.tasks.kit.archives import entries, extract

    try:
        checked = entries(archive, limit=limit, count=ARCHIVE_ENTRIES)
        extract(archive, dest, checked)
    except Refused as exc:
        raise TaskDataError(f"archive {archive.name}: entry {exc}",
                            hint="the archive is refused whole; unpack it yourself to see its entries") from None


class ParsedTasks:
    """For a family whose tasks are parsed task files (their `id` and `prompt`): `task` makes the
    core's Task of one and keeps it; `parsed` gives it back, parsed again from the Task's record
    in a process that did not load it. A family names its file's model in `task_file`."""

    def task_file(self) -> Any:
        """The pydantic model of the family's task file (imported when first needed)."""
        raise NotImplementedError

    def _parsed_files(self) -> dict[str, Any]:
        return self.__dict__.setdefault("_parsed", {})

    def task(self, parsed: Any, suite: str) -> Any:
        from orchard_cli.family import Task

        self._parsed_files()[parsed.id] = parsed
        return Task(task_id=parsed.id, suite=suite, family=getattr(self, "name"), problem_statement=parsed.prompt,
                    record=parsed.model_dump(mode="json"))

    def parsed(self, task: Any) -> Any:
        cache = self._parsed_files()
        found = cache.get(task.task_id)
        if found is None:
            found = cache[task.task_id] = self.task_file().model_validate(task.record)
        return found
