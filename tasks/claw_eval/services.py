"""A task's mock services, started with their own command lines from the checkout root.

Each service gets a free port of its own on the host (passed as PORT, as Claw-Eval's own
`apply_port_offset` does), so two workers never clash; every URL of the task (health check,
reset, tool endpoints) is rewritten to it. Ready when the health check answers below 500 (with
`X-Health-Check: 1`, which exempts it from the services' error injection). The pool keeps a
started set per service definition for the next episode of the same task (reset, not restarted),
a few sets at most; the agent's sandbox has its own network namespace and reaches none of them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from orchard_cli.home import state_dir
from orchard_cli.tasks.kit.leases import LeasePool

_HOSTPORT = re.compile(r"(?:localhost|127\.0\.0\.1|0\.0\.0\.0):(\d+)")
MAX_FREE = 4
"""Started sets kept for reuse beyond the ones leased; the oldest is stopped past this."""


class ServiceStartError(RuntimeError):
    """A service would not start or get ready: the episode is an env_error."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceSet:
    """The running services of one task definition."""

    def __init__(self, services: list[dict[str, Any]], root: Path, python: str, environ: dict[str, str]) -> None:
        self.services = services
        self.root, self.python, self.environ = root, python, environ
        self.ports = {int(s["port"]): free_port() for s in services}
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.logdir = Path(tempfile.mkdtemp(prefix="svc-", dir=state_dir("claw-eval", "services")))
        self.client = httpx.Client(trust_env=False, timeout=30.0)

    def url(self, url: str) -> str:
        """A task URL with its port moved to this set's port (127.0.0.1)."""
        def move(match: re.Match) -> str:
            port = int(match.group(1))
            return f"127.0.0.1:{self.ports.get(port, port)}"
        return _HOSTPORT.sub(move, url)

    def start(self) -> None:
        try:
            for svc in self.services:
                self._spawn(svc)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, svc: dict[str, Any]) -> None:
        cmd = shlex.split(svc["command"])
        if cmd and cmd[0] in ("python", "python3"):
            cmd[0] = self.python
        env = {**self.environ, **(svc.get("env") or {}), "PORT": str(self.ports[int(svc["port"])])}
        log = open(self.logdir / f"{svc['name']}.log", "wb")
        proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs.append((svc["name"], proc))
        deadline = time.monotonic() + float(svc.get("ready_timeout") or 10)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServiceStartError(f"service {svc['name']!r} exited (rc={proc.returncode}): {self.log_tail(svc['name'])}")
            if self.healthy(svc):
                return
            time.sleep(0.1)
        raise ServiceStartError(f"service {svc['name']!r} was not ready within {svc.get('ready_timeout')}s: "
                                f"{self.log_tail(svc['name'])}")

    def log_tail(self, name: str) -> str:
        try:
            text = (self.logdir / f"{name}.log").read_text(errors="replace").strip()
        except OSError:
            return ""
        return " ".join(text.splitlines()[-1:])[-300:] if text else "(no output)"

    def healthy(self, svc: dict[str, Any]) -> bool:
        method = (svc.get("health_check_method") or "POST").upper()
        try:
            reply = self.client.request(method, self.url(svc["health_check"]), headers={"X-Health-Check": "1"},
                                        timeout=2.0)
        except httpx.HTTPError:
            return False
        return reply.status_code < 500

    def reset(self) -> None:
        for svc in self.services:
            if svc.get("reset_endpoint"):
                reply = self.client.post(self.url(svc["reset_endpoint"]), timeout=10.0)
                if reply.status_code >= 400:
                    raise ServiceStartError(f"service {svc['name']!r}: reset answered {reply.status_code}")

    def audit(self) -> dict[str, Any]:
        """Every service's /audit (next to its reset endpoint), by service name; best effort like
        Claw-Eval's own runner (a service without one is left out)."""
        found: dict[str, Any] = {}
        for svc in self.services:
            if not svc.get("reset_endpoint"):
                continue
            url = self.url(svc["reset_endpoint"]).rsplit("/reset", 1)[0] + "/audit"
            try:
                reply = self.client.get(url, timeout=10.0)
                found[svc["name"]] = reply.json()
            except (httpx.HTTPError, json.JSONDecodeError):
                continue
        return found

    def failed(self) -> str | None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                return f"service {name!r} exited (rc={proc.returncode}): {self.log_tail(name)}"
        return None

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for _, proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        self.procs = []
        self.client.close()


def set_key(services: list[dict[str, Any]]) -> str:
    return json.dumps([[s["name"], s["command"], s.get("env") or {}, s["port"]] for s in services], sort_keys=True)


class ServicePool(LeasePool[ServiceSet]):
    """Started sets by task definition (orchard_cli.tasks.kit.leases): leased per episode, kept for the next
    episode whose task defines the same services, stopped at close."""

    def __init__(self) -> None:
        super().__init__(prefix="ce", keep=MAX_FREE)

    def lease_for(self, services: list[dict[str, Any]], root: Path, python: str, environ: dict[str, str]) -> str:
        def start() -> ServiceSet:
            made = ServiceSet(services, root, python, environ)
            made.start()
            return made

        return self.lease(set_key(services), start)[0]
