"""Images in records: content-addressed files beside a JSONL file, never base64 inside a line.

A model call that shows the model a screenshot carries it as a data URL (`data:image/png;base64,
...`, in chat `image_url` parts and Responses `input_image` items) or as a base64 source
(`{"type": "base64", "media_type": "image/png", "data": ...}`). Written to a trajectories file
(or the proxy's calls file), each such image becomes a file `images/<sha256>.<ext>` beside it,
written once however many calls re-send it, and the record holds `orchard-image:<sha256>.<ext>`
where the base64 was. `internalize` turns the references back into data URLs (for a trainer or a
server that needs the bytes); `orchard view` shows them as images.

A leaf module: standard library only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

IMAGES_DIR = "images"
PREFIX = "orchard-image:"
_DATA_URL = re.compile(r"^data:(image/(png|jpeg|jpg|gif|webp));base64,", re.IGNORECASE)
_EXT = {"image/png": "png", "image/jpeg": "jpg", "image/jpg": "jpg", "image/gif": "gif", "image/webp": "webp"}
_MIME = {"png": "image/png", "jpg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
_NAME = re.compile(r"^[0-9a-f]{64}\.(png|jpg|gif|webp)$")


def images_dir(jsonl: str | Path) -> Path:
    """Where the images of a JSONL file's records live: `images/` beside it."""
    return Path(jsonl).parent / IMAGES_DIR


def might_hold_images(text: str) -> bool:
    """A cheap look at a record's JSON before walking it."""
    return "data:image/" in text or '"base64"' in text


class ImageStore:
    """Thread-safe. `externalize(value)` returns `value` with every image moved to a file."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._lock = threading.Lock()
        self._known: set[str] = set()

    def put(self, data: bytes, mime: str) -> str:
        """The reference of an image's bytes, its file written when new (atomically)."""
        name = f"{hashlib.sha256(data).hexdigest()}.{_EXT.get(mime.lower(), 'png')}"
        with self._lock:
            if name in self._known:
                return PREFIX + name
            target = self.folder / name
            if not target.exists():
                self.folder.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, target)
            self._known.add(name)
        return PREFIX + name

    def externalize(self, value: Any) -> Any:
        if isinstance(value, str):
            match = _DATA_URL.match(value)
            if match is None:
                return value
            try:
                data = base64.b64decode(value[match.end():], validate=False)
            except (binascii.Error, ValueError):
                return value
            return self.put(data, match.group(1))
        if isinstance(value, list):
            return [self.externalize(v) for v in value]
        if isinstance(value, dict):
            if value.get("type") == "base64" and str(value.get("media_type", "")).startswith("image/") \
                    and isinstance(value.get("data"), str):
                try:
                    data = base64.b64decode(value["data"], validate=False)
                except (binascii.Error, ValueError):
                    return value
                return {**value, "data": self.put(data, value["media_type"])}
            return {k: self.externalize(v) for k, v in value.items()}
        return value


def path_of(ref: str, folder: str | Path) -> Path | None:
    """The file of a reference (None for anything else, or a name that is not a store's)."""
    if not isinstance(ref, str) or not ref.startswith(PREFIX) or not _NAME.match(ref[len(PREFIX):]):
        return None
    return Path(folder) / ref[len(PREFIX):]


def internalize(value: Any, folder: str | Path) -> Any:
    """`value` with each reference back as a data URL (a base64 source's `data` as base64)."""
    if isinstance(value, str):
        path = path_of(value, folder)
        if path is None:
            return value
        mime = _MIME[path.suffix[1:]]
        return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"
    if isinstance(value, list):
        return [internalize(v, folder) for v in value]
    if isinstance(value, dict):
        if value.get("type") == "base64" and path_of(value.get("data"), folder) is not None:
            return {**value, "data": base64.b64encode(path_of(value["data"], folder).read_bytes()).decode()}
        return {k: internalize(v, folder) for k, v in value.items()}
    return value
