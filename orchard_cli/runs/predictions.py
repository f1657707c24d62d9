"""SWE-bench's predictions format, read and written.

A predictions file is JSONL (one object per line), a JSON list of objects, or a JSON object keyed
by instance id. Each object has `instance_id`, `model_name_or_path` and `model_patch` (a unified
diff; empty or null means the model gave no patch). Other keys are ignored, as the official
harness ignores them. Every problem is reported as one line naming the line or the id, and
nothing is written anywhere before the whole file has been checked.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchard_cli.errors import UsageError
from orchard_cli.records import JsonlWriter, read_jsonl, write_text

PREDICTIONS_SCHEMA_VERSION = 1

_DIFF_FILE_HEADER = re.compile(r"^(diff --git |--- )", re.MULTILINE)
_DIFF_HUNK_OR_BINARY = re.compile(r"^(@@ |Binary files |GIT binary patch|rename from |deleted file mode |"
                                  r"new file mode |old mode )", re.MULTILINE)


class Prediction(BaseModel):
    """One line of a SWE-bench predictions file."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    model_name_or_path: str = ""
    model_patch: str = ""
    """The unified diff; '' when the model produced none."""

    def swebench_record(self) -> dict[str, Any]:
        """The line as SWE-bench writes it, plus orchard's schema_version (ignored by SWE-bench)."""
        return {"instance_id": self.instance_id, "model_name_or_path": self.model_name_or_path,
                "model_patch": self.model_patch, "schema_version": PREDICTIONS_SCHEMA_VERSION}


def looks_like_diff(patch: str) -> bool:
    """A unified diff: a file header (`diff --git` or `---`) and a hunk (or a git-only change)."""
    return bool(_DIFF_FILE_HEADER.search(patch) and _DIFF_HUNK_OR_BINARY.search(patch))


def _entries(path: Path, text: str) -> list[tuple[str, Any]]:
    """(where, object) pairs: `where` names the line or the key for error messages."""
    stripped = text.strip()
    if not stripped:
        raise UsageError(f"{path}: the predictions file is empty")
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        whole = None
        if stripped[0] == "[":
            try:
                json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
    if isinstance(whole, list):
        return [(f"item {i}", item) for i, item in enumerate(whole)]
    if isinstance(whole, dict):
        if "instance_id" in whole or "model_patch" in whole:
            return [("line 1", whole)]  # a one-line JSONL file
        entries = []
        for key, item in whole.items():
            if isinstance(item, dict) and item.get("instance_id", key) != key:
                raise UsageError(f"{path}: key {key!r} holds instance_id {item['instance_id']!r}")
            entries.append((f"key {key!r}", {"instance_id": key, **item} if isinstance(item, dict) else item))
        return entries
    if whole is not None:
        raise UsageError(f"{path}: expected JSONL, a JSON list or a JSON object keyed by instance id")
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} line {number}: not valid JSON ({exc.msg} at column {exc.colno})",
                             hint="each line must be one JSON object") from None
    return entries


def load_predictions(path: str | Path, known_ids: set[str] | None = None,
                     known_as: str = "the selected tasks") -> dict[str, Prediction]:
    """Read and check a predictions file; `known_ids` (named `known_as`) rejects other ids."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"predictions file {path} does not exist",
                         hint="use --predictions gold, empty, or a path to a SWE-bench predictions file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read predictions file {path}: {exc}") from None
    out: dict[str, Prediction] = {}
    for where, item in _entries(path, text):
        if not isinstance(item, dict):
            raise UsageError(f"{path} {where}: expected a JSON object, got {type(item).__name__}")
        instance_id = item.get("instance_id")
        if not isinstance(instance_id, str) or not instance_id:
            raise UsageError(f"{path} {where}: missing instance_id")
        patch = item.get("model_patch")
        if patch is None and "model_patch" not in item:
            raise UsageError(f"{path} {where} ({instance_id}): missing model_patch",
                             hint="use an empty string for an instance without a patch")
        if patch is not None and not isinstance(patch, str):
            raise UsageError(f"{path} {where} ({instance_id}): model_patch must be a string")
        patch = patch or ""
        if patch.strip() and not looks_like_diff(patch):
            raise UsageError(f"{path} {where} ({instance_id}): model_patch is not a unified diff",
                             hint="a patch needs a file header (diff --git / ---) and a hunk (@@)")
        if instance_id in out:
            raise UsageError(f"{path} {where}: instance {instance_id!r} appears twice")
        if known_ids is not None and instance_id not in known_ids:
            raise UsageError(f"{path} {where}: unknown instance {instance_id!r} (not in {known_as})",
                             hint="check the suite, --dataset and the --instances / --repo / --limit filters")
        name = item.get("model_name_or_path") or ""
        out[instance_id] = Prediction(instance_id=instance_id, model_name_or_path=str(name),
                                      model_patch=patch)
    return out


class PredictionsLog:
    """A run's predictions in SWE-bench's format, so the official harness can re-check it:
    `predictions.jsonl` for attempt 1, `predictions-attempt-K.jsonl` for attempt K > 1. Lines are
    appended as attempts finish (a crash loses nothing finished); `close()` rewrites each file
    with one line per instance, the latest (a retried attempt replaces its earlier line)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._lock = threading.Lock()
        self._writers: dict[int, JsonlWriter] = {}

    @staticmethod
    def file_name(attempt: int) -> str:
        return "predictions.jsonl" if attempt == 1 else f"predictions-attempt-{attempt}.jsonl"

    def write(self, attempt: int, instance_id: str, model: str, patch: str) -> None:
        with self._lock:
            writer = self._writers.get(attempt)
            if writer is None:
                writer = self._writers[attempt] = JsonlWriter(self.folder / self.file_name(attempt))
        writer.write(Prediction(instance_id=instance_id, model_name_or_path=model,
                                model_patch=patch).swebench_record())

    def close(self) -> None:
        with self._lock:
            writers, self._writers = self._writers, {}
        for writer in writers.values():
            writer.close()
        for path in sorted(self.folder.glob("predictions*.jsonl")):
            rows, _ = read_jsonl(path)
            latest = {r["instance_id"]: r for r in rows}
            write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in latest.values()))
