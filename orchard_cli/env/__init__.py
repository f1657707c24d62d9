"""Orchard Env: one sandbox API over the local, docker and kubernetes backends.

`connect()` gives the API a caller uses: the service at ORCHARD_ENV_URL when that is set
(`EnvClient`), otherwise an in-process `EnvManager` over a backend. Harnesses and graders receive a
`SandboxHandle`, which binds one sandbox id to that API.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from orchard_cli.env.models import (
    ExecRequest,
    Job,
    PatchResult,
    SandboxInfo,
    SandboxSpec,
)

if TYPE_CHECKING:
    pass


class Env(Protocol):
    """What `EnvManager` (in-process) and `EnvClient` (HTTP) both offer."""

    def create_sandbox(self, spec: SandboxSpec, *, wait: bool = True) -> SandboxInfo: ...
    def wait_sandbox(self, sandbox_id: str, timeout: float = 300.0) -> SandboxInfo: ...
    def get_sandbox(self, sandbox_id: str) -> SandboxInfo: ...
    def list_sandboxes(self) -> list[SandboxInfo]: ...
    def heartbeat(self, sandbox_id: str) -> SandboxInfo: ...
    def delete_sandbox(self, sandbox_id: str) -> SandboxInfo: ...
    def exec(self, sandbox_id: str, request: ExecRequest) -> Job: ...
    def get_job(self, job_id: str) -> Job: ...
    def wait_job(self, job_id: str, timeout: float | None = None) -> Job: ...
    def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> str: ...
    def read_file(self, sandbox_id: str, path: str) -> bytes: ...
    def apply_patch(self, sandbox_id: str, patch: str, cwd: str | None = None) -> PatchResult: ...
    def gc(self) -> list[str]: ...
    def close(self) -> None: ...


def connect(backend: str | None = None, url: str | None = None, **backend_options) -> Env:
    """The service at `url` / ORCHARD_ENV_URL if set, else an in-process manager over `backend`."""
    url = url or os.environ.get("ORCHARD_ENV_URL")
    if url:
        from orchard_cli.env.client import EnvClient

        return EnvClient(url)
    from orchard_cli.env.manager import EnvManager

    return EnvManager(backend or os.environ.get("ORCHARD_ENV_BACKEND") or "local", **backend_options)


class SandboxHandle:
    """One sandbox, bound to an Env: what harnesses and graders see."""

    def __init__(self, env: Env, info: SandboxInfo) -> None:
        self.env = env
        self.info = info

    @classmethod
    def create(cls, env: Env, spec: SandboxSpec | None = None, **fields) -> "SandboxHandle":
        spec = spec or SandboxSpec(**fields)
        return cls(env, env.create_sandbox(spec, wait=True))

    @property
    def id(self) -> str:
        return self.info.sandbox_id

    @property
    def workdir(self) -> str:
        return self.info.spec.workdir

    def exec(self, command: str | list[str], *, timeout: float = 600.0, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: str | None = None) -> Job:
        """Run a command and wait for it (the common case for harnesses and graders)."""
        request = ExecRequest(command=command, timeout_seconds=timeout, cwd=cwd, env=env or {},
                              stdin=stdin, wait=True)
        return self.env.exec(self.id, request)

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> str:
        return self.env.write_file(self.id, path, data.encode() if isinstance(data, str) else data, mode)

    def read_file(self, path: str) -> bytes:
        return self.env.read_file(self.id, path)

    def apply_patch(self, patch: str, cwd: str | None = None) -> PatchResult:
        return self.env.apply_patch(self.id, patch, cwd)

    def heartbeat(self) -> None:
        self.env.heartbeat(self.id)

    def destroy(self) -> None:
        self.env.delete_sandbox(self.id)

    def __enter__(self) -> "SandboxHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()
