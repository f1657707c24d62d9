"""`chat`: one model call, no tools: the prompt as the user's message, the reply as the answer
(see chat_main.py, which is what runs inside the sandbox). For single-turn families (`quiz`) and RL
on them; it needs only a python3 in the sandbox's image and binds nothing in."""

from __future__ import annotations

import shlex
from pathlib import Path

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount
from orchard_cli.harnesses.base import HarnessContext, HarnessRun
from orchard_cli.harnesses.bash_agent import find_python, summary_line
from orchard_cli.harnesses.common import run_command

AGENT_DIR = "/tmp/orchard-chat"
SCRIPT = Path(__file__).with_name("chat_main.py")


class ChatHarness:
    name = "chat"

    def check(self) -> list[str]:
        return [] if SCRIPT.is_file() else [f"{SCRIPT} is missing: pip install --force-reinstall orchard-cli"]

    def version(self) -> str | None:
        from orchard_cli import __version__

        return f"orchard-chat {__version__}"

    def mounts(self) -> list[Mount]:
        return []

    def run(self, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
        try:
            sandbox.write_file(f"{AGENT_DIR}/chat.py", SCRIPT.read_bytes())
            sandbox.write_file(f"{AGENT_DIR}/prompt.txt", context.prompt)
        except Exception as exc:  # noqa: BLE001 - a harness failure is returned, never raised
            return HarnessRun(exit_code=None, error=f"could not set up the harness in the sandbox: {exc}")
        argv = ["-I", f"{AGENT_DIR}/chat.py", "--base-url", context.base_url, "--model", context.model,
                "--prompt-file", f"{AGENT_DIR}/prompt.txt"]
        command = f'{find_python()} exec "$PY" {shlex.join(argv)} </dev/null'
        return run_command(sandbox, command, timeout=context.timeout_seconds,
                           env={"ORCHARD_API_KEY": context.api_key, "HOME": AGENT_DIR}, inspect=summary_line)
