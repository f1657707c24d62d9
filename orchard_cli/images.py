"""Images in records: content-addressed files beside a JSONL file, never base64 inside a line.

A model call that shows the model a screenshot carries it as a data URL (`data:image/png;base64,
...`, in chat `image_url` parts and Responses `input_image` items) or as a base64 source
(`{"type": "base64", "media_type": "image/png", "data": ...}`). Written to a trajectories file
(or the proxy's calls file), each such image becomes a file `<stem>.images/<sha256>.<ext>` beside
it (`trajectories.images/` for `trajectories.jsonl`), written once however many calls re-send it,
and the record holds `orchard-image:<sha256>.<ext>` where the base64 was. Only image content parts
are rewritten (a chat `image_url` part's URL, a Responses `input_image`'s `image_url`, an `image`
part's base64 `source`), never other text that happens to look like a data URL. Copy the folder
with the file: a record's images resolve against it. `internalize` turns the references back into data URLs (for a trainer or a
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

PREFIX = "orchard-image:"
_DATA_URL = re.compile(r"^data:(image/(png|jpeg|jpg|gif|webp));base64,", re.IGNORECASE)
_EXT = {"image/png": "png", "image/jpeg": "jpg", "image/jpg": "jpg", "image/gif": "gif", "image/webp": "webp"}
_MIME = {"png": "image/png", "jpg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
_NAME = re.compile(r"^[0-9a-f]{64}\.(png|jpg|gif|webp)$")


def images_dir(jsonl: str | Path) -> Path:
    """Where the images of a JSONL file's records live: `<stem>.images/` beside it."""
    path = Path(jsonl)
    return path.with_name(path.stem + ".images")


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
                os.chmod(tmp, 0o644)  # as readable as the JSONL beside it
                os.replace(tmp, target)
            self._known.add(name)
        return PREFIX + name

    def externalize(self, value: Any) -> Any:
        """`value` with each image content part's bytes moved to a file (other values as they are)."""
        if isinstance(value, list):
            return [self.externalize(v) for v in value]
        if not isinstance(value, dict):
            return value
        kind = value.get("type")
        if kind in ("image_url", "input_image"):
            url = value.get("image_url")
            if isinstance(url, dict) and isinstance(url.get("url"), str):
                return {**value, "image_url": {**url, "url": self._data_url(url["url"])}}
            if isinstance(url, str):
                return {**value, "image_url": self._data_url(url)}
            return value
        source = value.get("source")
        if kind == "image" and isinstance(source, dict) and source.get("type") == "base64" \
                and str(source.get("media_type", "")).startswith("image/") and isinstance(source.get("data"), str):
            data = _decode(source["data"])
            if data is None:
                return value
            return {**value, "source": {**source, "data": self.put(data, source["media_type"])}}
        return {k: self.externalize(v) for k, v in value.items()}

    def _data_url(self, url: str) -> str:
        match = _DATA_URL.match(url)
        data = _decode(url[match.end():]) if match else None
        return url if data is None else self.put(data, match.group(1))


def _decode(text: str) -> bytes | None:
    """Strict base64 (whitespace ignored); None for anything else, which then stays as it is."""
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None


def path_of(ref: str, folder: str | Path) -> Path | None:
    """The file of a reference (None for anything else, or a name that is not a store's)."""
    if not isinstance(ref, str) or not ref.startswith(PREFIX) or not _NAME.match(ref[len(PREFIX):]):
        return None
    return Path(folder) / ref[len(PREFIX):]


def internalize(value: Any, folder: str | Path) -> Any:
    """`value` with each image part's reference back as a data URL (a base64 source's `data` as
    base64)."""
    if isinstance(value, list):
        return [internalize(v, folder) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    if kind in ("image_url", "input_image"):
        url = value.get("image_url")
        if isinstance(url, dict):
            return {**value, "image_url": {**url, "url": _url_of(url.get("url"), folder)}}
        return {**value, "image_url": _url_of(url, folder)}
    source = value.get("source")
    if kind == "image" and isinstance(source, dict) and path_of(source.get("data"), folder) is not None:
        data = path_of(source["data"], folder).read_bytes()
        return {**value, "source": {**source, "data": base64.b64encode(data).decode()}}
    return {k: internalize(v, folder) for k, v in value.items()}


def _url_of(ref: Any, folder: str | Path) -> Any:
    path = path_of(ref, folder)
    if path is None:
        return ref
    return f"data:{_MIME[path.suffix[1:]]};base64,{base64.b64encode(path.read_bytes()).decode()}"
