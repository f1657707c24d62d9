"""The service's cap on a request body, applied before the body is read.

A body announced larger than MAX_BODY_BYTES (its Content-Length) is answered 413 at once, nothing
of it read; a body without a length (chunked) is read here as it arrives and answered 413 as soon
as it passes the cap (else handed to the app), so the service never holds more than the cap of any
request in memory.
"""

from __future__ import annotations

import json
from typing import Any

from orchard_cli.env.models import MAX_FILE_BYTES

MAX_BODY_BYTES = MAX_FILE_BYTES * 4 // 3 + (4 << 20)
"""A file at the file API's limit, base64 in JSON, with room to spare (~89 MiB)."""


class BodyLimit:
    """ASGI middleware: 413 for an HTTP request body over `limit` bytes, before it is read."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        length = headers.get(b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > self.limit:
            await self._refuse(send, int(length))
            return
        if length is not None:  # announced within the cap (the server holds the client to it)
            await self.app(scope, receive, send)
            return
        held, seen = [], 0  # no length (chunked): read it here, up to the cap, then hand it over
        while True:
            message = await receive()
            if message["type"] != "http.request":
                held.append(message)
                break
            seen += len(message.get("body") or b"")
            if seen > self.limit:
                await self._refuse(send, seen)
                return
            held.append(message)
            if not message.get("more_body"):
                break

        async def replay() -> Any:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any, size: int) -> None:
        body = json.dumps({"detail": f"the request body is {size} bytes or more, over the service's limit of "
                                     f"{self.limit} bytes", "hint": "files are at most 64 MiB (MAX_FILE_BYTES)",
                           "error": "TooLargeError"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
