"""`zeroclaw`: the ZeroClaw agent (a single Rust binary), one message, headless, in the sandbox.

No registry reachable from orchard's machines ships a ZeroClaw binary (its source needs Rust 1.96
and crates from the internet), so `check()` says where to put one: on PATH, or at
<harnesses root>/zeroclaw/zeroclaw. The binary is bound read-only into the sandbox.

Its config (from ZeroClaw's source, not run here): a custom OpenAI-compatible provider whose `uri`
is the proxy episode's base URL (single-message mode calls `POST {uri}/chat/completions` with
stream false), a permissive risk profile (the sandbox is the boundary), and one agent using both.
A task's tools come in as an MCP server (`[[mcp.servers]]`, stdio, orchard's mcp_server.mjs on
orchard's Node, eager schemas: `deferred_loading = false`), granted to the agent through an MCP
bundle (ZeroClaw gives an agent no MCP server it is not granted); it names them `<server>__<tool>`.
"""

from __future__ import annotations

import json
import subprocess

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount
from orchard_cli.harnesses.base import HarnessContext, HarnessRun
from orchard_cli.harnesses.common import check_tools, headless, mcp_launch, not_ready, run_command, tools_mounts
from orchard_cli.harnesses.install import NODE, SANDBOX_ROOT, find_binary, harnesses_root, package_mounts

HOME = "/tmp/zeroclaw-home"
CONFIG_DIR = f"{HOME}/config"
AGENT = "orchard"
BINARY = f"{SANDBOX_ROOT}/zeroclaw/zeroclaw"


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string of printable text is a TOML basic string


def render_config(context: HarnessContext) -> str:
    """config.toml: one custom provider at the proxy, a permissive risk profile, one agent, and the
    task's tools as an MCP server granted to it."""
    return "\n".join([
        f"[providers.models.custom.{AGENT}]",
        f"uri = {_toml(context.base_url)}",
        f"model = {_toml(context.model)}",
        f"api_key = {_toml(context.api_key)}",
        "",
        f"[risk_profiles.{AGENT}]",
        'level = "full"',
        "workspace_only = false",
        "block_high_risk_commands = false",
        "require_approval_for_medium_risk = false",
        "",
        f"[runtime_profiles.{AGENT}]",
        f"max_tool_iterations = {context.max_turns}",
        "",
        f"[agents.{AGENT}]",
        f'model_provider = "custom.{AGENT}"',
        f"risk_profile = {_toml(AGENT)}",
        f"runtime_profile = {_toml(AGENT)}",
        *([f"mcp_bundles = [{_toml(AGENT)}]"] if context.tools is not None else []),
        "",
        *_mcp_tables(context),
    ])


def _mcp_tables(context: HarnessContext) -> list[str]:
    if context.tools is None:
        return []
    launch, name = mcp_launch(context.tools), context.tools.server_name
    env = ", ".join(f"{key} = {_toml(value)}" for key, value in launch.env.items())
    return [
        "[mcp]",
        "enabled = true",
        "deferred_loading = false",
        "",
        "[[mcp.servers]]",
        f"name = {_toml(name)}",
        'transport = "stdio"',
        f"command = {_toml(launch.command)}",
        f"args = [{', '.join(_toml(a) for a in launch.args)}]",
        f"env = {{ {env} }}",
        "",
        f"[mcp_bundles.{AGENT}]",
        f"servers = [{_toml(name)}]",
        "",
    ]


class ZeroClaw:
    name = "zeroclaw"

    def check(self) -> list[str]:
        if find_binary("zeroclaw") is not None:
            return []
        return [f"no zeroclaw binary (on PATH or at {harnesses_root() / 'zeroclaw' / 'zeroclaw'}); no "
                "package registry reachable here ships one: build it where the internet is reachable "
                "(`cargo install --locked zeroclaw`, Rust >= 1.96) and copy the binary there"]

    def version(self) -> str | None:
        binary = find_binary("zeroclaw")
        if binary is None:
            return None
        try:
            out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=15,
                                 stdin=subprocess.DEVNULL).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.split()[-1] if out else None

    def mounts(self) -> list[Mount]:
        binary = find_binary("zeroclaw")
        if binary is None:
            return []
        # orchard's Node runs the task-tool MCP server (the binary itself needs none)
        return [Mount(source=str(binary), target=BINARY, read_only=True), *package_mounts(NODE),
                *tools_mounts(mcp=True)]

    def argv(self, context: HarnessContext) -> list[str]:
        return [BINARY, "--config-dir", CONFIG_DIR, "agent", "-a", AGENT, "-m", context.prompt]

    def run(self, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
        problems = self.check() + check_tools(context, node=True)
        if problems:
            return not_ready(problems)
        try:
            sandbox.write_file(f"{CONFIG_DIR}/config.toml", render_config(context), mode=0o600)
        except Exception as exc:  # noqa: BLE001 - returned, never raised
            return HarnessRun(exit_code=None, error=f"could not write ZeroClaw's config: {exc}")
        command = headless(self.argv(context), home=HOME, needs=[BINARY])
        return run_command(sandbox, command, timeout=context.timeout_seconds,
                           env={"HOME": HOME, "NO_COLOR": "1"})
