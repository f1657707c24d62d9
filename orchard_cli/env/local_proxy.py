"""network='proxy' for local sandboxes, host side: a Unix socket whose connections go to proxy_url.

The sandbox has its own network namespace with only loopback. Its runner listens on 127.0.0.1
there and forwards each connection to this socket (bound into the sandbox at /.orchard); a thread
here accepts it and relays the bytes to proxy_url's host and port. The sandbox reaches that one
address and nothing else.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

from orchard_cli.env.runner_channel import bind_unix

CHUNK = 65536


def sandbox_proxy_url(proxy_url: str, port: int) -> str:
    """ORCHARD_PROXY_URL as seen inside the sandbox: the runner's port plus proxy_url's path."""
    parts = urlsplit(proxy_url)
    return f"{parts.scheme}://127.0.0.1:{port}{parts.path.rstrip('/')}"


class ProxyForwarder:
    def __init__(self, path: Path, proxy_url: str) -> None:
        parts = urlsplit(proxy_url)
        self.target = (parts.hostname or "127.0.0.1",
                       parts.port or (443 if parts.scheme == "https" else 80))
        self.server = bind_unix(path)
        os.chmod(path, 0o666)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="orchard-local-proxy", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if self._closed:
                conn.close()
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=30)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        relay(conn, upstream)

    def close(self) -> None:
        self._closed = True
        try:
            self.server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.server.close()


def relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides have finished sending."""
    socks = {a.fileno(): a, b.fileno(): b}
    peer = {a.fileno(): b, b.fileno(): a}
    poller = select.poll()
    for fd in socks:
        poller.register(fd, select.POLLIN)
    reading = set(socks)
    try:
        while reading:
            for fd, _ in poller.poll():
                data = socks[fd].recv(CHUNK)
                if data:
                    peer[fd].sendall(data)
                    continue
                reading.discard(fd)
                poller.unregister(fd)
                try:
                    peer[fd].shutdown(socket.SHUT_WR)
                except OSError:
                    pass
    except OSError:
        pass
    finally:
        a.close()
        b.close()
