"""The web-mini apps' process: every site on a loopback port of its own (HTTP, threads), every
request logged, and control over stdin/stdout only, as JSON lines (no HTTP route reaches it):

    python -m orchard_cli.tasks.web.apps.server --root DIR      (behind the kit's guard: see control.py)

    -> {"ready": true, "ports": {"shop": 40123, ...}}            once, when every port listens
    <- {"id": 1, "op": "reset", "fixture": {...}}                 all sites to the fixture, the log emptied
    <- {"id": 2, "op": "query", "site": "shop", "sql": "SELECT ..."}   rows, read-only
    <- {"id": 3, "op": "requests"}                                the request log since the reset
    <- {"id": 4, "op": "snapshot"}                                every site's state, summed up
    -> {"id": N, "ok": true, "result": ...} | {"id": N, "ok": false, "error": "one line"}

Until the first reset (and after a failed one) every page answers 503.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from orchard_cli.tasks.web.apps.fixture import load
from orchard_cli.tasks.web.apps.kit import Request, Response, esc

SITES = ("shop", "wiki", "mail", "booking")
BODY_LIMIT = 1 << 20


def _site(name: str, folder: Path) -> Any:
    folder.mkdir(parents=True, exist_ok=True)
    if name == "shop":
        from orchard_cli.tasks.web.apps.shop import Shop
        return Shop(folder)
    if name == "wiki":
        from orchard_cli.tasks.web.apps.wiki import Wiki
        return Wiki(folder)
    if name == "mail":
        from orchard_cli.tasks.web.apps.mail import Webmail
        return Webmail(folder)
    from orchard_cli.tasks.web.apps.booking import Booking
    return Booking(folder)


def _flat(values: dict[str, list[str]]) -> dict[str, Any]:
    """A field given once is its string; given more often, the list of them."""
    return {k: v[0] if len(v) == 1 else v for k, v in values.items()}


class Apps:
    """The sites, their request log and the lock every request and control call holds."""

    def __init__(self, root: Path) -> None:
        self.lock = threading.RLock()
        self.sites = {name: _site(name, root / name) for name in SITES}
        self.log: list[dict[str, Any]] = []
        self.ready = False

    def handle(self, site: str, request: Request) -> Response:
        with self.lock:
            if not self.ready:
                response = Response(503, "<!doctype html><title>Starting</title><p>The site is starting.</p>")
            else:
                try:
                    response = self.sites[site].handle(request)
                except Exception:  # a bug in a page: a 500 to the browser, the trace to the log
                    traceback.print_exc(file=sys.stderr)
                    response = Response(500, f"<!doctype html><title>Error</title><h1>Internal error</h1>"
                                             f"<p>{esc(request.path)} failed.</p>")
            self.log.append({"site": site, "method": request.method, "path": unquote(request.path),
                             "query": _flat(request.query), "form": _flat(request.form),
                             "status": response.status, "at": round(time.time(), 3)})
        return response

    # --- control --------------------------------------------------------------------------
    def reset(self, data: Any) -> None:
        with self.lock:
            self.ready = False
            fixture = load(data)
            for site in self.sites.values():
                site.reset(fixture)
            self.log = []
            self.ready = True

    def _known(self, site: str) -> Any:
        if site not in self.sites:
            raise ValueError(f"no site {site!r} (sites: {', '.join(SITES)})")
        if not self.ready:
            raise ValueError("the apps hold no fixture (reset first)")
        return self.sites[site]

    def query(self, site: str, sql: str) -> list[list[Any]]:
        with self.lock:
            return self._known(site).query(sql)

    def requests(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.log)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {name: self._known(name).snapshot() for name in SITES}

    def control(self, message: dict[str, Any]) -> Any:
        op = message.get("op")
        if op == "reset":
            return self.reset(message.get("fixture") or {})
        if op == "query":
            return self.query(str(message.get("site")), str(message.get("sql")))
        if op == "requests":
            return self.requests()
        if op == "snapshot":
            return self.snapshot()
        if op == "ping":
            return "pong"
        raise ValueError(f"unknown op {op!r}")


def handler(apps: Apps, site: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = f"orchard-{site}"
        sys_version = ""

        def setup(self) -> None:
            super().setup()
            # headers and body go out in two writes: without this, Nagle's algorithm holds the body
            # back for the client's delayed ACK (40 ms per keep-alive request)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:  # noqa: N802 - http.server's hook names
            self._serve(b"")

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length > BODY_LIMIT:
                self.send_error(413)
                return
            self._serve(self.rfile.read(length))

        def _serve(self, body: bytes) -> None:
            parts = urlsplit(self.path)
            form: dict[str, list[str]] = {}
            if body and self.headers.get_content_type() == "application/x-www-form-urlencoded":
                form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            request = Request(self.command, parts.path or "/", parse_qs(parts.query, keep_blank_values=True), form)
            response = apps.handle(site, request)
            data = response.body.encode("utf-8")
            self.send_response(response.status)
            for name, value in response.headers:
                self.send_header(name, value)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the log is ours
            pass

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    control = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # a stray print goes to the log, never into the control channel
    sys.stdout = sys.stderr

    apps = Apps(args.root)
    servers = {}
    for site in SITES:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler(apps, site))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name=f"http-{site}", daemon=True).start()
        servers[site] = server
    control.write(json.dumps({"ready": True, "ports": {s: servers[s].server_address[1] for s in SITES}}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        message: Any = None
        try:
            message = json.loads(line)
            reply = {"id": message.get("id"), "ok": True, "result": apps.control(message)}
        except Exception as exc:  # every failure is one line back to the host
            expected = isinstance(exc, (ValueError, sqlite3.Error))
            if not expected:
                traceback.print_exc(file=sys.stderr)
            text = (str(exc).splitlines() or [""])[0] or type(exc).__name__
            reply = {"id": message.get("id") if isinstance(message, dict) else None, "ok": False,
                     "error": text if expected else f"{type(exc).__name__}: {text}"}
        control.write(json.dumps(reply, default=str) + "\n")
    for server in servers.values():
        server.shutdown()


if __name__ == "__main__":
    main()
