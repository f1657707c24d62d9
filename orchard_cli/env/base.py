"""The two small Protocols every sandbox backend implements.

A *backend* is lifecycle (create, list what it made, destroy by id, even orphans); a *sandbox* is
operations (exec, read and write files). Job tracking, expiry, heartbeats and gc live above both,
in `manager.py`, so each backend stays small. Implementations need not inherit from these.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from orchard_cli.env.models import ExecRequest, ExecResult, PtyRequest, Resource, SandboxInfo, SandboxSpec

# Capabilities the conformance suite checks; a backend lists what it cannot do in `unsupported`.
CAPABILITIES = frozenset({
    "network_block",   # network='none' really blocks
    "network_proxy",   # network='proxy' reaches the proxy and nothing else
    "network_drop",    # network='drop': nothing reachable, connects wait for their timeout
    "forwards",        # spec.forwards: fixed loopback ports inside reach their host:port, nothing else
    "memory_limit",    # memory beyond the limit is contained
    "pids_limit",      # a fork bomb is contained
    "readonly_root",   # writes outside the workdir and /tmp are refused
    "writable_root",   # spec.writable_root lets a command change the image's files
    "mounts",          # spec.mounts binds host paths into the sandbox
    "pty",             # terminal sessions (the published API's exec/pty WebSocket)
    "services",        # spec.services: side containers on a network private to the sandbox
})


@runtime_checkable
class Sandbox(Protocol):
    info: SandboxInfo

    def exec(self, request: ExecRequest) -> ExecResult:
        """Run one command to completion (or its timeout, killing its whole process tree)."""

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write a file; `path` is absolute inside the sandbox and already checked."""

    def read_file(self, path: str) -> bytes:
        """Read a file; raises NotFoundError when it does not exist."""

    def open_pty(self, request: PtyRequest) -> Any:
        """Start a process on a pseudo-terminal; returns a `runner_channel.Stream` whose first
        event is {"ready", "pid"}, then {"out"}... and {"exit"} (or {"error"}). A backend that
        has no terminals lists "pty" in `unsupported` and raises UsageError."""

    def destroy(self) -> None:
        """Stop everything in the sandbox and release its resources. Idempotent."""


@runtime_checkable
class SandboxBackend(Protocol):
    name: ClassVar[str]
    unsupported: ClassVar[frozenset[str]]

    def create(self, sandbox_id: str, spec: SandboxSpec, owner: str, expires_at: float) -> Sandbox:
        """Make a sandbox and return it ready; label its resources with id, owner and expiry."""

    def resources(self) -> list[Resource]:
        """Everything this backend created on this machine or cluster, tracked or not."""

    def destroy(self, sandbox_id: str) -> None:
        """Destroy a sandbox's resources by id, including an orphan's. Idempotent."""

    # Optional: `check(spec)` raises LimitError (HTTP 422) for a number this backend cannot honour
    # (the local backend: pids above the kernel's pid_max; docker: memory below its minimum). The
    # manager calls it before anything is made; a backend without it accepts what the spec allows.
