"""An Orchard Env service on loopback for tests: real uvicorn in a thread over a real manager."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx

from orchard_cli.env.auth import service_key
from orchard_cli.env.client import EnvClient
from orchard_cli.env.daemon import _bind
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.service import create_app


@dataclass
class Service:
    url: str
    key: str
    manager: EnvManager
    server: object

    def client(self, key: str | None = None) -> EnvClient:
        return EnvClient(self.url, key=key or self.key)

    def http(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"X-API-Key": key} if key else {}, timeout=30)


def _start(manager: EnvManager) -> Service:
    import uvicorn

    key = service_key()
    sock = _bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(manager, key), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the service did not start"
        time.sleep(0.02)
    service = Service(f"http://127.0.0.1:{sock.getsockname()[1]}", key, manager, server)
    service.thread = thread
    return service


def _stop(service: Service) -> None:
    service.server.should_exit = True
    service.thread.join(60)


