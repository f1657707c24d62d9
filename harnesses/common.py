"""What the harness adapters share: running one headless command in the sandbox and turning the
job into a `HarnessRun`, finding the proxy's address as the sandbox sees it, and how a harness
reaches a task's tools (the programs in orchard_cli/tools/sandbox, bound at SANDBOX_TOOLS_DIR)."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import Callable

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount
from orchard_cli.errors import OrchardError
from orchard_cli.harnesses.base import HarnessContext, HarnessRun
from orchard_cli.harnesses.install import MCP_SDK, NODE, SANDBOX_ROOT, missing, package_mounts
from orchard_cli.tools.spec import HOST_TOOLS_DIR, SANDBOX_TOOLS_DIR, ToolAccess

TAIL_CHARS = 8000
MISSING_EXIT = 127
MISSING_MARK = "orchard-harness-missing:"
MCP_SERVER = f"{SANDBOX_TOOLS_DIR}/mcp_server.mjs"
TASK_TOOL = f"{SANDBOX_TOOLS_DIR}/task_tool.py"
MCP_SDK_DIR = f"{SANDBOX_ROOT}/{MCP_SDK.folder}/node_modules/{MCP_SDK.package}"
"""The MCP SDK inside the sandbox (mcp_server.mjs imports it from ORCHARD_MCP_SDK)."""


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def require_files(*paths: str) -> str:
    """A shell prefix that stops with a clear line when a mounted program is not there."""
    checks = [f'[ -e {shlex.quote(p)} ] || {{ echo "{MISSING_MARK} {p} is not in the sandbox '
              f'(are the harness mounts bound?)" >&2; exit {MISSING_EXIT}; }}' for p in paths]
    return "; ".join(checks)


def headless(argv: list[str], *, home: str, needs: list[str] = ()) -> str:
    """The shell line that runs `argv` with a fresh private home and stdin closed."""
    prefix = require_files(*needs)
    line = f"mkdir -p {shlex.quote(home)} && exec {shlex.join(argv)} </dev/null"
    return f"{prefix}; {line}" if prefix else line


def run_command(sandbox: SandboxHandle, command: str, *, timeout: float, env: dict[str, str],
                cwd: str | None = None,
                inspect: Callable[[HarnessRun, str], None] | None = None) -> HarnessRun:
    """Run one harness command and report how it ended; never raises for a harness failure.

    `inspect(run, stdout)` may add what the harness's own output says (its `info`, an `error`)."""
    started = time.monotonic()
    try:
        job = sandbox.exec(command, timeout=timeout, cwd=cwd, env=env)
    except Exception as exc:  # noqa: BLE001 - an unreachable env service included: reported, not raised
        return HarnessRun(exit_code=None, duration_seconds=time.monotonic() - started,
                          error=f"the sandbox could not run the harness: {type(exc).__name__}: {exc}")
    run = HarnessRun(exit_code=job.exit_code, timed_out=job.timed_out,
                     duration_seconds=job.duration_seconds or time.monotonic() - started,
                     stdout_tail=tail(job.stdout), stderr_tail=tail(job.stderr))
    if job.did_not_run:
        run.error = f"the sandbox could not run the harness: {job.error}"
    elif run.timed_out:
        run.error = f"killed at its time limit ({timeout:g} s)"
    elif job.exit_code == MISSING_EXIT and MISSING_MARK in job.stderr:
        line = next(ln for ln in job.stderr.splitlines() if MISSING_MARK in ln)
        run.error = line.split(MISSING_MARK, 1)[1].strip()
    elif inspect is not None:
        try:
            inspect(run, job.stdout)
        except (ValueError, KeyError, TypeError) as exc:  # unreadable output is reported, not raised
            run.info["output_error"] = f"{type(exc).__name__}: {exc}"
    return run


def not_ready(problems: list[str]) -> HarnessRun:
    """The run of a harness whose prerequisites are missing."""
    return HarnessRun(exit_code=None, error="; ".join(problems))


def sandbox_base_url(sandbox: SandboxHandle) -> str | None:
    """ORCHARD_PROXY_URL as the sandbox sees it (a network='proxy' sandbox's one address), or None.

    With `proxy_url` set to a proxy episode's base URL, this is that episode's URL from inside:
    what `HarnessContext.base_url` should be."""
    try:
        job = sandbox.exec('printf %s "${ORCHARD_PROXY_URL:-}"', timeout=30)
    except OrchardError:
        return None
    value = job.stdout.strip() if job.exit_code == 0 else ""
    return value or None


# -- the task's tools -----------------------------------------------------------------------------
@dataclass(frozen=True)
class McpLaunch:
    """How a harness starts the task-tool MCP server (stdio), in its own config's terms."""

    command: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def tools_mounts(*, mcp: bool) -> list[Mount]:
    """The task-tool programs, read-only at SANDBOX_TOOLS_DIR, and (for a harness that loads them
    over MCP) the MCP SDK the server runs on, when it is installed (`check_tools` names it if not)."""
    mounts = [Mount(source=str(HOST_TOOLS_DIR), target=SANDBOX_TOOLS_DIR, read_only=True)]
    return mounts + (package_mounts(MCP_SDK) if mcp else [])


def tools_env(access: ToolAccess) -> dict[str, str]:
    """What task_tool.py and mcp_server.mjs read: the episode's tool gateway, its token, and the
    most one call's arguments may hold (the gateway's own limit)."""
    from orchard_cli.tools.spec import ARGUMENTS_LIMIT

    return {"ORCHARD_TOOLS_URL": access.url.rstrip("/"), "ORCHARD_TOOLS_TOKEN": access.token,
            "ORCHARD_TOOLS_MAX_ARGS_BYTES": str(ARGUMENTS_LIMIT)}


def mcp_launch(access: ToolAccess) -> McpLaunch:
    """`node mcp_server.mjs` on orchard's Node, with the gateway and the SDK in its environment."""
    return McpLaunch(command=NODE.sandbox_entry(), args=[MCP_SERVER],
                     env={**tools_env(access), "ORCHARD_MCP_SDK": MCP_SDK_DIR})


def check_tools(context: HarnessContext, *, node: bool = False) -> list[str]:
    """What an MCP harness lacks to load `context.tools`: the MCP SDK, and orchard's Node when the
    harness does not run on it anyway (`node=True`); [] without tools."""
    if context.tools is None:
        return []
    return missing(*((NODE, MCP_SDK) if node else (MCP_SDK,)))


# -- multi-turn: what a harness notes between the runs of one conversation -----------------------
def session_note(home: str, session: str) -> str:
    """Where a harness notes, in its private home in the sandbox, what its next turn of
    conversation `session` needs (Codex's thread id, OpenClaw's session id)."""
    return f"{home}/orchard-sessions/{session}"


def read_note(sandbox: SandboxHandle, path: str) -> str | None:
    """The note at `path`, or None when there is none (the conversation's first turn never ran here)."""
    try:
        return sandbox.read_file(path).decode().strip() or None
    except Exception:  # noqa: BLE001 - absent or unreadable alike: the caller says there is none
        return None


def write_note(run: HarnessRun, sandbox: SandboxHandle, path: str, value: str) -> None:
    """Note `value` at `path` for the next turn; a failure goes in `run.info["session_error"]`
    (the next turn then reports that it has nothing to continue)."""
    try:
        sandbox.write_file(path, value)
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        run.info["session_error"] = f"could not note the session for the next turn: {exc}"
