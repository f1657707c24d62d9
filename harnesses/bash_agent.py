"""`bash`: orchard's own minimal agent, one bash tool (see bash_agent_main.py, which is what runs
inside the sandbox). It needs only a python3 in the sandbox's image; what it mounts is orchard's
task-tool programs, through which it calls a task's tools from the shell (`task_tool.py`).

Continuing a conversation (`multi_turn`): with `HarnessContext.session` set, the agent saves its
message history in its private folder (`/tmp/orchard-bash-agent/sessions/<session>.json`, which
survives between runs in one sandbox); a resumed turn runs it with `--resume`, so it loads that
history, appends the prompt as the user's next message and carries on with its loop."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount
from orchard_cli.harnesses.base import HarnessContext, HarnessRun
from orchard_cli.harnesses.bash_agent_main import TASK_COMMAND
from orchard_cli.harnesses.common import MISSING_EXIT, MISSING_MARK, run_command, tools_env
from orchard_cli.tools.spec import HOST_TOOLS_DIR

AGENT_DIR = "/tmp/orchard-bash-agent"
TASK_TOOL_COPY = f"{AGENT_DIR}/bin/task_tool.py"
"""task_tool.py, written into the sandbox for a task with tools (the agent serves its Helper)."""
TASK_TOOL_COMMAND = f"{AGENT_DIR}/bin/{TASK_COMMAND}"
"""task_tool.sh as `task-tool` on the commands' PATH: a call to the agent's helper, no process."""
SCRIPT = Path(__file__).with_name("bash_agent_main.py")
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


class BashAgent:
    name = "bash"
    multi_turn = True

    def __init__(self, command_timeout: float = 120.0, output_limit: int = 10000) -> None:
        self.command_timeout = command_timeout
        self.output_limit = output_limit

    def check(self) -> list[str]:
        return [] if SCRIPT.is_file() else [f"{SCRIPT} is missing: pip install --force-reinstall orchard-cli"]

    def version(self) -> str | None:
        from orchard_cli import __version__

        return f"orchard-bash-agent {__version__}"

    def mounts(self) -> list[Mount]:
        return []  # nothing bound: it runs where mounts cannot be had (kubernetes); tools are written in

    def command(self, context: HarnessContext, workdir: str) -> str:
        """The shell line run in the sandbox: the first python3 found, isolated (-I)."""
        argv = ["-I", f"{AGENT_DIR}/agent.py", "--base-url", context.base_url, "--model", context.model,
                "--prompt-file", f"{AGENT_DIR}/prompt.txt", "--workdir", workdir,
                "--max-turns", str(context.max_turns), "--command-timeout", f"{self.command_timeout:g}",
                "--output-limit", str(self.output_limit)]
        if context.tools is not None:
            argv += ["--tools-file", f"{AGENT_DIR}/tools.json"]
        if context.session:
            argv += ["--session-file", f"{AGENT_DIR}/sessions/{context.session}.json"]
            argv += ["--resume"] if context.resume else []
        return f'{find_python()} exec "$PY" {shlex.join(argv)} </dev/null'

    def run(self, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
        try:
            sandbox.write_file(f"{AGENT_DIR}/agent.py", SCRIPT.read_bytes())
            sandbox.write_file(f"{AGENT_DIR}/prompt.txt", context.prompt)
            if context.tools is not None:
                sandbox.write_file(f"{AGENT_DIR}/tools.json", json.dumps(context.tools.specs))
                sandbox.write_file(TASK_TOOL_COPY, (HOST_TOOLS_DIR / "task_tool.py").read_bytes())
                sandbox.write_file(TASK_TOOL_COMMAND, (HOST_TOOLS_DIR / "task_tool.sh").read_bytes(), mode=0o755)
        except Exception as exc:  # noqa: BLE001 - a harness failure is returned, never raised
            return HarnessRun(exit_code=None, error=f"could not set up the agent in the sandbox: {exc}")
        env = {"ORCHARD_API_KEY": context.api_key, "HOME": AGENT_DIR}
        if context.tools is not None:
            env.update(tools_env(context.tools), PATH=f"{AGENT_DIR}/bin:{SANDBOX_PATH}")
        return run_command(sandbox, self.command(context, sandbox.workdir), timeout=context.timeout_seconds,
                           env=env, inspect=summary_line)


def find_python() -> str:
    """Shell that sets $PY to the sandbox image's python3 (or exits as a missing prerequisite)."""
    pythons = " ".join(PYTHONS)
    return (f'PY=; for p in {pythons}; do [ -x "$p" ] && {{ PY=$p; break; }}; done; '
            f'[ -n "$PY" ] || PY=$(command -v python3) || {{ echo "{MISSING_MARK} no python3 in the '
            f'sandbox image" >&2; exit {MISSING_EXIT}; }};')


def summary_line(run: HarnessRun, stdout: str) -> None:
    """The agent's last stdout line is its JSON summary."""
    lines = [ln for ln in stdout.strip().splitlines() if ln.startswith("{")]
    if not lines:
        return
    summary = json.loads(lines[-1])
    run.info.update({k: str(v) for k, v in summary.items()})
    if summary.get("finish") == "error":
        run.error = str(summary.get("error") or "the agent stopped on an error")
