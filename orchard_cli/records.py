"""Records on disk: append-only JSONL and atomically replaced JSON documents.

Every record carries `schema_version`. A JSONL record is one JSON object on one line, written with
a single `write` of `line + "\\n"` on a file opened with O_APPEND, then flushed and fsynced, so a
record that finished is on disk before the next one starts. A crash can leave at most one torn
final line: it has no trailing newline, and readers never accept it (even when the fragment
happens to parse), they flag it. A writer that reopens such a file cuts the torn fragment off
before appending, so a new record is never glued to a fragment.

The env, the proxy and the records never import tasks or harnesses (imports point one way).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError


class ReadReport(BaseModel):
    """What a reader found besides the records: a torn tail and lines that are not records."""

    model_config = ConfigDict(extra="forbid")

    path: str
    records: int = 0
    torn_tail: bool = False
    """The file ends in a fragment without a newline (a writer died mid-record); it was skipped."""
    bad_lines: list[int] = Field(default_factory=list)
    """1-based numbers of complete lines that are not JSON objects with a schema_version."""


def _to_dict(record: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    data = record.model_dump(mode="json") if isinstance(record, BaseModel) else dict(record)
    if "schema_version" not in data:
        raise ValueError("every record needs a schema_version")
    return data


def encode_line(record: BaseModel | Mapping[str, Any]) -> bytes:
    """One record as one line of compact JSON (newlines inside strings are escaped by JSON)."""
    return (json.dumps(_to_dict(record), ensure_ascii=False, separators=(",", ":"),
                       default=str) + "\n").encode("utf-8")


def cut_torn_tail(path: Path) -> bool:
    """Drop a final fragment that has no newline. Returns True when one was dropped."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size == 0:
        return False
    with path.open("rb+") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return False
        # Walk back to the last newline; everything after it is the torn fragment.
        pos, chunk = size, 65536
        keep = 0
        while pos > 0:
            start = max(0, pos - chunk)
            fh.seek(start)
            block = fh.read(pos - start)
            idx = block.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
    return True


class JsonlWriter:
    """Append records to a JSONL file, one durable line at a time. Thread-safe."""

    def __init__(self, path: str | Path, *, fsync: bool = True, images: bool = False) -> None:
        """`images`: records' images go to files beside the file (orchard_cli.images), never
        base64 inside a line (trajectories)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired = cut_torn_tail(self.path)
        self._fsync = fsync
        self._images = None
        if images:
            from orchard_cli.images import ImageStore, images_dir

            self._images = ImageStore(images_dir(self.path))
        self._lock = threading.Lock()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: BaseModel | Mapping[str, Any]) -> None:
        data = encode_line(record)
        if self._images is not None:
            from orchard_cli.images import might_hold_images

            if might_hold_images(data.decode("utf-8", "replace")):
                try:
                    data = encode_line(self._images.externalize(_to_dict(record)))
                except OSError:  # images that cannot be stored stay inline: the record is not lost
                    pass
        with self._lock:
            if self._fd is None:
                raise ValueError(f"writer for {self.path} is closed")
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self._fsync:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_jsonl(path: str | Path, report: ReadReport | None = None) -> Iterator[dict[str, Any]]:
    """Yield each whole record; skip (and note in `report`) a torn tail and bad lines."""
    path = Path(path)
    report = report if report is not None else ReadReport(path=str(path))
    if not path.exists():
        return
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                report.torn_tail = True
                break
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                report.bad_lines.append(number)
                continue
            if not isinstance(data, dict) or "schema_version" not in data:
                report.bad_lines.append(number)
                continue
            report.records += 1
            yield data


def read_jsonl(path: str | Path) -> tuple[list[dict[str, Any]], ReadReport]:
    """All whole records of a JSONL file, and what was skipped."""
    report = ReadReport(path=str(path))
    return list(iter_jsonl(path, report)), report


def write_json(path: str | Path, record: BaseModel | Mapping[str, Any]) -> None:
    """Replace a JSON document atomically: write a temp file, fsync, rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_to_dict(record), indent=2, ensure_ascii=False, default=str) + "\n"
    write_text(path, text)


def write_text(path: str | Path, text: str) -> None:
    """Replace a text file atomically (temp file in the same folder, fsync, rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)  # never a stray temp file beside a target we could not write
        if isinstance(exc, IsADirectoryError):
            raise UsageError(f"{path} is a folder; name a file to write") from None
        raise


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON document with a schema_version; a one-line UsageError when it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise UsageError(f"{path} is not an orchard record (no schema_version)")
    return data


def sha256_file(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
