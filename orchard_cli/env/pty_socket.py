"""The published API's terminal sessions: `WS /sandboxes/{id}/exec/pty`.

Every frame is a JSON text frame; bytes travel base64. The client's first frame is
`{"type": "init", "cmd": [...], "env": {}, "cwd": null, "rows": 24, "cols": 80, "login_shell":
false}`; then `stdin` (`data`), `signal` (`sig`: TERM, KILL, INT, HUP, QUIT), `resize` (`rows`,
`cols`) and `close`. The service answers `{"type": "ready", "pid"}`, then `stdout` frames
(`data`; the terminal merges stdout and stderr), then `{"type": "exit", "code"}` (minus the signal
number when one killed the process) after every output frame, and closes; or `{"type": "error",
"message"}`. Refusals close with 4401 (key), 4404 (no such sandbox), 4409 (not ready), 4400 (a bad
or missing init within 10 s), 4500 (the process could not start). The process runs on a real
pseudo-terminal in a session of its own, through the sandbox runner (local and docker backends).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from typing import Any

from pydantic import ValidationError

from orchard_cli.env.models import PtyRequest
from orchard_cli.errors import NotFoundError, OrchardError

INIT_TIMEOUT = 10.0
SIGNALS = {"TERM": 15, "KILL": 9, "INT": 2, "HUP": 1, "QUIT": 3}


async def _thread(fn: Any, *args: Any) -> Any:
    import anyio.to_thread

    return await anyio.to_thread.run_sync(fn, *args)


async def _refuse(ws: Any, message: str, code: int) -> None:
    await ws.send_text(json.dumps({"type": "error", "message": message}))
    await ws.close(code=code)


async def serve_pty(ws: Any, manager: Any, sandbox_id: str) -> None:
    """One terminal session, from the WebSocket's handshake to the process's exit."""
    await ws.accept()  # first: a refusal's code reaches the client (a close before accept is a bare 403)
    try:
        info = await _thread(manager.get_sandbox, sandbox_id)
    except NotFoundError:
        await ws.close(code=4404)
        return
    if info.status != "ready":
        await ws.close(code=4409)
        return
    try:
        init = json.loads(await asyncio.wait_for(ws.receive_text(), INIT_TIMEOUT))
    except asyncio.TimeoutError:
        await _refuse(ws, "init timeout", 4400)
        return
    except (ValueError, KeyError, RuntimeError):
        await _refuse(ws, "bad init frame: not JSON text", 4400)
        return
    if not isinstance(init, dict) or init.get("type") != "init":
        await _refuse(ws, "bad init frame: the first frame must be {\"type\": \"init\", ...}", 4400)
        return
    try:
        request = PtyRequest(**{k: init[k] for k in ("cmd", "env", "cwd", "rows", "cols", "login_shell")
                                if k in init and init[k] is not None})
    except ValidationError as exc:
        await _refuse(ws, f"bad init frame: {exc.errors()[0]['msg']}", 4400)
        return
    try:
        stream = await _thread(manager.open_pty, sandbox_id, request)
        first = await _thread(stream.get, INIT_TIMEOUT)
    except OrchardError as exc:
        await _refuse(ws, f"spawn failed: {exc.message}", 4500)
        return
    if not first or "ready" not in first:
        await _refuse(ws, f"spawn failed: {_error_text(first)}", 4500)
        return
    await ws.send_text(json.dumps({"type": "ready", "pid": first.get("pid")}))
    output = asyncio.create_task(_outgoing(ws, stream))
    incoming = asyncio.create_task(_incoming(ws, stream))
    done, _ = await asyncio.wait({output, incoming}, return_when=asyncio.FIRST_COMPLETED)
    if incoming in done:  # the client went away first: the process goes too
        stream.send("pty_close")
        output.cancel()
        return
    incoming.cancel()
    try:
        await ws.close()
    except RuntimeError:
        pass


def _error_text(event: dict | None) -> str:
    if not event:
        return "the sandbox runner did not answer"
    error = event.get("error") or ""
    try:
        return base64.b64decode(error).decode(errors="replace")
    except (binascii.Error, ValueError):
        return str(error)


async def _outgoing(ws: Any, stream: Any) -> None:
    """The process's output, then its exit code (or the error that ended it)."""
    while True:
        event = await _thread(stream.get, 0.5)
        if event is None:
            continue
        if "out" in event:
            await ws.send_text(json.dumps({"type": "stdout", "data": event["out"]}))
        elif "exit" in event:
            await ws.send_text(json.dumps({"type": "exit", "code": event["exit"]}))
            return
        elif "error" in event:
            await ws.send_text(json.dumps({"type": "error", "message": _error_text(event)}))
            return


async def _incoming(ws: Any, stream: Any) -> None:
    """The client's frames, until it disconnects (or sends close)."""
    while True:
        message = await ws.receive()
        if message.get("type") == "websocket.disconnect":
            return
        try:
            frame = json.loads(message.get("text") or "")
        except ValueError:
            continue  # unparseable frames are ignored, as the published server does
        kind = frame.get("type") if isinstance(frame, dict) else None
        if kind == "stdin":
            try:
                stream.send("pty_in", data=base64.b64decode(frame.get("data") or ""))
            except (binascii.Error, ValueError):
                continue
        elif kind == "signal":
            stream.send("pty_signal", sig=SIGNALS.get(str(frame.get("sig", "TERM")).upper(), 15))
        elif kind == "resize":
            rows, cols = frame.get("rows"), frame.get("cols")
            if isinstance(rows, int) and isinstance(cols, int) and rows > 0 and cols > 0:
                stream.send("pty_resize", rows=rows, cols=cols)
        elif kind == "close":
            stream.send("pty_signal", sig=15)
            return
