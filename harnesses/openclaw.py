"""`openclaw`: the real OpenClaw agent, one headless turn (`openclaw agent exec`), inside the
sandbox, on orchard's Node 24.

Its config (JSON is JSON5) replaces the model catalogue with one provider, `orchard`, speaking
chat completions to the proxy episode's URL with the episode's token. OPENCLAW_HOME and HOME are
a private folder in the sandbox's /tmp. OpenClaw keeps calling the model while it has tool calls
to make; the episode's call cap stops a runaway loop, and the wall-clock limit stops the rest.

A task's tools come in as an MCP server (`mcp.servers.<server_name>`, stdio, orchard's
mcp_server.mjs on orchard's Node); OpenClaw shows them to the model as `<server_name>__<tool>`.
Its Tool Search is turned off (`tools.toolSearch: false`) so their schemas reach the model as
plain tools rather than behind tool_search / tool_describe / tool_call.
"""

from __future__ import annotations

import json
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount
from orchard_cli.harnesses.base import HarnessContext, HarnessRun
from orchard_cli.harnesses.common import check_tools, headless, mcp_launch, not_ready, run_command, tools_mounts
from orchard_cli.harnesses.install import NODE, OPENCLAW, missing, package_mounts

HOME = "/tmp/openclaw-home"
CONFIG = f"{HOME}/orchard.json5"
PROMPT = f"{HOME}/prompt.md"
GRACE_SECONDS = 15.0
"""OpenClaw's own deadline is this much shorter than the wall-clock limit, so it ends itself and
reports before it is killed."""
PROVIDER = "orchard"


def render_config(context: HarnessContext) -> dict[str, Any]:
    model = context.model
    config: dict[str, Any] = {
        "models": {"mode": "replace", "providers": {PROVIDER: {
            "baseUrl": context.base_url, "apiKey": context.api_key, "api": "openai-completions",
            "models": [{"id": model, "name": model}]}}},
        "agents": {"defaults": {"model": {"primary": f"{PROVIDER}/{model}"}}},
    }
    if context.tools is not None:
        launch = mcp_launch(context.tools)
        config["mcp"] = {"servers": {context.tools.server_name: {
            "command": launch.command, "args": launch.args, "env": launch.env}}}
        config["tools"] = {"toolSearch": False}
    return config


class OpenClaw:
    name = "openclaw"

    def check(self) -> list[str]:
        return missing(NODE, OPENCLAW)

    def version(self) -> str | None:
        return OPENCLAW.installed_version()

    def mounts(self) -> list[Mount]:
        harness = package_mounts(NODE, OPENCLAW)
        return harness + tools_mounts(mcp=True) if harness else []   # nothing to run, nothing to bind

    def argv(self, context: HarnessContext, workdir: str) -> list[str]:
        return [NODE.sandbox_entry(), OPENCLAW.sandbox_entry(), "agent", "exec", "--config", CONFIG,
                "--cwd", workdir, "--model", f"{PROVIDER}/{context.model}", "--json",
                "--timeout", str(max(5, int(context.timeout_seconds - GRACE_SECONDS))),
                "--message-file", PROMPT]

    def run(self, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
        problems = self.check() + check_tools(context)
        if problems:
            return not_ready(problems)
        try:
            sandbox.write_file(CONFIG, json.dumps(render_config(context), indent=2), mode=0o600)
            sandbox.write_file(PROMPT, context.prompt)
        except Exception as exc:  # noqa: BLE001 - returned, never raised
            return HarnessRun(exit_code=None, error=f"could not write OpenClaw's config and prompt: {exc}")
        command = headless(self.argv(context, sandbox.workdir), home=HOME,
                           needs=[NODE.sandbox_entry(), OPENCLAW.sandbox_entry()])
        env = {"OPENCLAW_HOME": HOME, "HOME": HOME, "NO_COLOR": "1"}
        return run_command(sandbox, command, timeout=context.timeout_seconds, env=env, inspect=inspect_result)


def _result_object(stdout: str) -> dict[str, Any] | None:
    text = stdout.strip()
    start = text.find("{\n") if not text.startswith("{") else 0
    if start < 0:
        return None
    try:
        value = json.loads(text[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def inspect_result(run: HarnessRun, stdout: str) -> None:
    """Read the JSON result `openclaw agent exec --json` prints."""
    result = _result_object(stdout)
    if result is None:
        if run.exit_code != 0:
            run.error = "openclaw printed no result (see stderr_tail)"
        return
    tools = result.get("toolSummary") or {}
    run.info.update({"status": str(result.get("status", "")),
                     "tool_calls": str(tools.get("calls", 0)),
                     "turns": str(result.get("assistantTurns", 0))})
    if result.get("final"):
        run.info["last_message"] = str(result["final"])[-2000:]
    if not result.get("ok", run.exit_code == 0):
        error = result.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else str(error)
        run.error = f"openclaw: {(message or result.get('status') or 'failed')[:2000]}"
