"""The call record: one model call as the recording proxy saw it, and the JSONL file of them.

A record is embedded in trajectories, so it is versioned (`schema_version`) and strict
(`extra="forbid"`). Secrets never appear in it: the proxy does not record headers, and any
occurrence of the upstream key in a body is replaced by `[REDACTED]` before the record exists.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchard_cli.errors import UsageError
from orchard_cli.images import ImageStore, images_dir, might_hold_images
from orchard_cli.records import cut_torn_tail

SCHEMA_VERSION = 2  # of a call record; 2 adds `weight_version` (schema 1 records read as before)
SUMMARY_SCHEMA_VERSION = 1
REDACTED = "[REDACTED]"

ErrorType = Literal["infra", "upstream", "capped", "client", "translation"]


class CallTiming(BaseModel):
    model_config = ConfigDict(extra="forbid")

    started_at: float = Field(description="Unix time (s) when the proxy received the request.")
    first_byte_ms: float | None = Field(None, description="ms from start to the first upstream byte.")
    ended_ms: float = Field(description="ms from start to the end of the answer sent to the harness.")


class CallUsage(BaseModel):
    """Token counts, normalized across chat (prompt/completion) and Responses (input/output)."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None


class CallError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: ErrorType = Field(description="infra: upstream unreachable, timed out or cut mid-stream; "
                                        "upstream: it answered an error status; capped: the episode "
                                        "hit its cap; client: bad request or harness hung up; "
                                        "translation: the request cannot be carried to the upstream.")
    message: str
    status: int | None = Field(None, description="HTTP status involved, when there is one.")


class CallRecord(BaseModel):
    """One model call. `request`/`response` are in the dialect the harness spoke; when the proxy
    translated, `upstream_request`/`upstream_response` hold what went over the wire upstream.
    Streamed responses are assembled into the shape of the non-streamed answer. In a file (the
    proxy's `--out`, a trajectories file), an image content part's data URL is replaced by
    `orchard-image:<sha256>.<ext>`, a file in `<stem>.images/` beside it (orchard_cli.images;
    `internalize` gives the data URLs back); in memory it is the data URL as sent.

    Schema 2 adds `weight_version`; schema 1 records read as before (no version)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1, 2] = SCHEMA_VERSION
    id: str = Field(description="Unique call id.")
    episode: str = Field(description="Episode id (never its token).")
    seq: int = Field(description="0-based order of the call within its episode.")
    endpoint: Literal["chat", "responses"] = Field(description="The API the harness called.")
    upstream_endpoint: Literal["chat", "responses"] | None = Field(
        None, description="The API called upstream; None when the call was not forwarded.")
    stream: bool = False
    model: str | None = None
    status: int = Field(description="HTTP status the harness received.")
    request: Any = Field(description="The request body as the harness sent it.")
    response: Any = Field(None, description="The (assembled) response body the harness received.")
    upstream_request: Any = None
    upstream_response: Any = None
    usage: CallUsage | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = Field(None, description="Per completion token, when returned.")
    weight_version: str | None = Field(
        None, description="The version of the weights that answered, when the server says (orchard serve's "
                          "`weight_version`; SGLang's `meta_info.weight_version`).")
    attempts: int = Field(0, description="Upstream attempts (retries on 429/5xx included).")
    timing: CallTiming
    error: CallError | None = None


class EpisodeSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SUMMARY_SCHEMA_VERSION
    episode: str
    calls: int
    input_tokens: int
    output_tokens: int
    errors: int
    infra_errors: int
    capped: str | None = Field(None, description="Why the episode was capped, if it was.")


class JsonlWriter:
    """Appends records as JSON lines from a background thread, off the proxy's hot path.

    The thread wakes every `interval_s` and writes what has queued up in one `os.write`, so that
    it does not compete with the proxy's event loop for the GIL on every call. Lines are written
    whole (O_APPEND), so they never interleave and a crash leaves at most one unterminated final
    line, which readers skip and which a new writer on the same file cuts off before its first
    line. `close()` writes everything still queued.
    """

    def __init__(self, path: Path, secrets: list[str] | None = None, interval_s: float = 0.05) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._secrets = [s for s in secrets or [] if s]
        self._interval = interval_s
        self.repaired = cut_torn_tail(self.path)  # a proxy killed mid-line: start on a fresh one
        self._images = ImageStore(images_dir(self.path))  # screenshots as files, not base64 lines
        self._image_error = False
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._queue: queue.SimpleQueue[CallRecord] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orchard-proxy-writer", daemon=True)
        self._thread.start()

    def write(self, record: CallRecord) -> None:
        self._queue.put(record)

    def _drain(self) -> None:
        lines = []
        while True:
            try:
                record = self._queue.get_nowait()
            except queue.Empty:
                break
            line = record.model_dump_json()
            if might_hold_images(line):
                try:
                    line = json.dumps(self._images.externalize(json.loads(line)), ensure_ascii=False,
                                      separators=(",", ":"))
                except (OSError, ValueError) as exc:  # the line keeps its images; the writer lives on
                    if not self._image_error:
                        self._image_error = True
                        sys.stderr.write(f"orchard proxy: images stay inline in {self.path}: {exc}\n")
            for secret in self._secrets:  # last line of defence; records are scrubbed upstream
                line = line.replace(secret, REDACTED)
            lines.append(line + "\n")
        data = "".join(lines).encode()  # one write per pass: each os.write hands the GIL back
        while data:
            data = data[os.write(self._fd, data):]

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._drain()
        self._drain()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        try:
            os.close(self._fd)
        except OSError:
            pass


def read_records(path: Path) -> list[CallRecord]:
    """All complete records of a calls file; a torn final line is skipped, never half-read."""
    out = []
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.endswith(b"\n"):
                break
            try:
                out.append(CallRecord.model_validate_json(line))
            except ValidationError as exc:
                raise UsageError(f"{path}:{number}: not a call record ({exc.error_count()} errors)") from exc
    return out
