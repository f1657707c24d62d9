"""`web`: orchard's own web agent (web_agent_main.py runs inside the sandbox): text-only
accessibility-tree prompts and BrowserGym-style actions, so even the embedded model can drive a
browser task. It needs a task with browser tools (the web and miniwob families) and a python3 in
the sandbox's image; nothing is bound in.

Continuing a conversation (`multi_turn`): with `HarnessContext.session` set, the agent saves the
conversation (the user's messages, its answers) and its actions in its private folder
(`/tmp/orchard-web-agent/sessions/<session>.json`); a resumed turn runs it with `--resume`, the
prompt being the user's next message, and each model call then shows the whole conversation in
place of the task. The browser is the episode's, so it is where the last turn left it."""

from __future__ import annotations

import shlex
from pathlib import Path

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount
from orchard_cli.harnesses.base import HarnessContext, HarnessRun
from orchard_cli.harnesses.bash_agent import find_python, summary_line
from orchard_cli.harnesses.common import run_command, tools_env

AGENT_DIR = "/tmp/orchard-web-agent"
SCRIPT = Path(__file__).with_name("web_agent_main.py")


class WebAgent:
    name = "web"
    multi_turn = True

    def check(self) -> list[str]:
        return [] if SCRIPT.is_file() else [f"{SCRIPT} is missing: pip install --force-reinstall orchard-cli"]

    def version(self) -> str | None:
        from orchard_cli import __version__

        return f"orchard-web-agent {__version__}"

    def mounts(self) -> list[Mount]:
        return []

    def command(self, context: HarnessContext) -> str:
        argv = ["-I", f"{AGENT_DIR}/agent.py", "--base-url", context.base_url, "--model", context.model,
                "--prompt-file", f"{AGENT_DIR}/prompt.txt", "--max-turns", str(context.max_turns)]
        if context.session:
            argv += ["--session-file", f"{AGENT_DIR}/sessions/{context.session}.json"]
            argv += ["--resume"] if context.resume else []
        return f'{find_python()} exec "$PY" {shlex.join(argv)} </dev/null'

    def run(self, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
        if context.tools is None:
            return HarnessRun(exit_code=None, error="the web agent needs a task with browser tools "
                                                    "(the web or miniwob family)")
        try:
            sandbox.write_file(f"{AGENT_DIR}/agent.py", SCRIPT.read_bytes())
            sandbox.write_file(f"{AGENT_DIR}/prompt.txt", context.prompt)
        except Exception as exc:  # noqa: BLE001 - a harness failure is returned, never raised
            return HarnessRun(exit_code=None, error=f"could not set up the agent in the sandbox: {exc}")
        env = {"ORCHARD_API_KEY": context.api_key, "HOME": AGENT_DIR, **tools_env(context.tools)}
        return run_command(sandbox, self.command(context), timeout=context.timeout_seconds, env=env,
                           inspect=summary_line)
