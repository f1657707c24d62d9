"""The host side of a sandbox's relayed ports: a Unix socket whose connections go to one host:port.

network='proxy' and spec.forwards, for every backend that runs the sandbox runner (local,
docker). The sandbox has its own network namespace with only loopback. Its runner listens on
127.0.0.1:<port> there, once for the proxy and once per forward, and relays each connection to
that listener's Unix socket (bound into the sandbox: /.orchard for local, the control folder for
docker); a thread here accepts it and relays the bytes to the listener's target: proxy_url's host
and port, or the forward's host:port. The sandbox reaches those addresses and nothing else.
"""

from __future__ import annotations

import base64
import os
import select
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

from orchard_cli.env.models import SandboxSpec
from orchard_cli.env.runner_channel import bind_unix
from orchard_cli.errors import UsageError

CHUNK = 65536


def sandbox_proxy_url(proxy_url: str, port: int) -> str:
    """ORCHARD_PROXY_URL as seen inside the sandbox: the runner's port plus proxy_url's path."""
    parts = urlsplit(proxy_url)
    return f"{parts.scheme}://127.0.0.1:{port}{parts.path.rstrip('/')}"


def url_target(proxy_url: str) -> tuple[str, int]:
    """proxy_url's (host, port): where its connections go (80 or 443 when it names no port)."""
    parts = urlsplit(proxy_url)
    return (parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80))


class ProxyForwarder:
    """Accepts on the Unix socket at `path` and relays each connection to `target`."""

    def __init__(self, path: Path, target: tuple[str, int] | str) -> None:
        """`target`: (host, port) on this host, or a proxy URL (its host and port)."""
        self.target = url_target(target) if isinstance(target, str) else target
        self.server = bind_unix(path)
        os.chmod(path, 0o666)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name=f"orchard-relay-{path.stem}",
                                        daemon=True)
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


def open_relays(spec: SandboxSpec, host_dir: Path, inside_dir: str,
                proxy_port: int = 0) -> tuple[list[ProxyForwarder], list[list]]:
    """The host ends of a sandbox's relayed ports (one per forward, then the proxy's), each on a
    socket in `host_dir` (seen inside as `inside_dir`), and the runner's `listen` config for
    them: [port inside, socket inside] in the same order. The forwards come first, so a proxy
    on port 0 (any) never takes one of their ports."""
    wanted = [(f.port, f"fwd-{f.port}", f.address) for f in spec.forwards]
    if spec.network == "proxy" and spec.proxy_url:
        wanted.append((proxy_port, "proxy", url_target(spec.proxy_url)))
    forwarders: list[ProxyForwarder] = []
    try:
        for _, name, target in wanted:
            forwarders.append(ProxyForwarder(host_dir / f"{name}.sock", target))
    except BaseException:
        close_relays(forwarders)
        raise
    return forwarders, [[port, f"{inside_dir}/{name}.sock"] for port, name, _ in wanted]


def close_relays(forwarders: list[ProxyForwarder]) -> None:
    for forwarder in forwarders:
        forwarder.close()


def check_listening(hello: dict) -> None:
    """The runner's hello said it could not listen on a port: one clear line."""
    error = hello.get("listen_error")
    if error:
        raise UsageError(base64.b64decode(error).decode(errors="replace"),
                         hint="ports below 1024 need a sandbox user allowed to bind them; "
                              "forward a port above 1023")


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
