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

Continuing a conversation (`multi_turn`): `agent exec` always starts a new session (a fresh
random id, its state deleted after the run, even with `--state-dir`). With
`HarnessContext.session` set, every turn runs the embedded agent on a kept state folder instead:
`openclaw agent --local --session-id <session> --model ... --json --timeout ... --message-file
prompt.md`, with OPENCLAW_CONFIG_PATH the same config plus the defaults `agent exec` would have
set (workspace = the task's folder, no bootstrap files, no agent sandbox, the `coding` tool
profile, file tools kept to the workspace), so turn 1 asks the model exactly what `agent exec`
asks. The first turn starts session `<session>`, a later one continues it (its history comes from
the state folder, which survives between runs in one sandbox). Its `{payloads, meta}` result is
read in `agent exec`'s envelope terms.
"""

from __future__ import annotations

import json
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount
from orchard_cli.harnesses.base import HarnessContext, HarnessRun
from orchard_cli.harnesses.common import (check_tools, headless, mcp_launch, not_ready, read_note, run_command,
                                         session_note, tools_mounts, write_note)
from orchard_cli.harnesses.install import NODE, OPENCLAW, missing, package_mounts

HOME = "/tmp/openclaw-home"
CONFIG = f"{HOME}/orchard.json5"
PROMPT = f"{HOME}/prompt.md"
STATE = f"{HOME}/.openclaw"
"""A kept conversation's state folder (where `agent exec` reads its plugin skills from too)."""
GRACE_SECONDS = 15.0
"""OpenClaw's own deadline is this much shorter than the wall-clock limit, so it ends itself and
reports before it is killed."""
PROVIDER = "orchard"


def render_config(context: HarnessContext, workdir: str | None = None) -> dict[str, Any]:
    """The config; with `workdir` (a kept conversation, run by `agent --local`) also the defaults
    `agent exec` sets for itself."""
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
    if workdir is not None:
        config["agents"]["defaults"].update(workspace=workdir, skipBootstrap=True, sandbox={"mode": "off"})
        config.setdefault("tools", {}).update(profile="coding", fs={"workspaceOnly": True}, exec={"mode": "full"})
        config.update(env={"shellEnv": {"enabled": False}}, skills={"load": {"watch": False}})
    return config


class OpenClaw:
    name = "openclaw"
    multi_turn = True

    def check(self) -> list[str]:
        return missing(NODE, OPENCLAW)

    def version(self) -> str | None:
        return OPENCLAW.installed_version()

    def mounts(self) -> list[Mount]:
        harness = package_mounts(NODE, OPENCLAW)
        return harness + tools_mounts(mcp=True) if harness else []   # nothing to run, nothing to bind

    def argv(self, context: HarnessContext, workdir: str) -> list[str]:
        """`agent exec` for one turn; `agent --local --session-id` for a turn of a conversation."""
        timeout = str(max(5, int(context.timeout_seconds - GRACE_SECONDS)))
        common = ["--model", f"{PROVIDER}/{context.model}", "--json", "--timeout", timeout, "--message-file", PROMPT]
        if context.session:
            return [NODE.sandbox_entry(), OPENCLAW.sandbox_entry(), "agent", "--local",
                    "--session-id", context.session, *common]
        return [NODE.sandbox_entry(), OPENCLAW.sandbox_entry(), "agent", "exec", "--config", CONFIG,
                "--cwd", workdir, *common]

    def run(self, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
        problems = self.check() + check_tools(context)
        if problems:
            return not_ready(problems)
        note = session_note(HOME, context.session) if context.session else None
        if context.resume and (note is None or read_note(sandbox, note) is None):
            return HarnessRun(exit_code=None, error=f"no OpenClaw session {context.session!r} in this sandbox: "
                                                    "the conversation's first turn did not run here")
        config = render_config(context, sandbox.workdir if context.session else None)
        try:
            sandbox.write_file(CONFIG, json.dumps(config, indent=2), mode=0o600)
            sandbox.write_file(PROMPT, context.prompt)
        except Exception as exc:  # noqa: BLE001 - returned, never raised
            return HarnessRun(exit_code=None, error=f"could not write OpenClaw's config and prompt: {exc}")
        command = headless(self.argv(context, sandbox.workdir), home=HOME,
                           needs=[NODE.sandbox_entry(), OPENCLAW.sandbox_entry()])
        env = {"OPENCLAW_HOME": HOME, "HOME": HOME, "NO_COLOR": "1"}
        if context.session:
            env.update(OPENCLAW_CONFIG_PATH=CONFIG, OPENCLAW_STATE_DIR=STATE)
        run = run_command(sandbox, command, timeout=context.timeout_seconds, env=env, inspect=inspect_result)
        if note is not None and run.info.get("session_id"):
            run.info["session"] = context.session or ""
            write_note(run, sandbox, note, run.info["session_id"])
        return run


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


def exec_envelope(result: dict[str, Any]) -> dict[str, Any]:
    """`agent --local --json`'s `{payloads, meta}` in the terms of `agent exec --json`'s envelope
    (as OpenClaw's own `classifyAgentExecResult` maps them); an envelope is returned as it is."""
    if "ok" in result or not isinstance(result.get("meta"), dict):
        return result
    meta, payloads = result["meta"], [p for p in result.get("payloads") or [] if isinstance(p, dict)]
    agent = meta.get("agentMeta") or {}
    failed_payload = next((p for p in payloads if p.get("isError")), None)
    timeout = meta.get("stopReason") == "timeout" or meta.get("timeoutPhase") is not None
    failed = bool(meta.get("aborted") or meta.get("error") or meta.get("stopReason") == "error" or failed_payload)
    status = "timeout" if timeout else "error" if failed else "ok"
    shown = [p["text"].rstrip() for p in payloads if isinstance(p.get("text"), str) and p["text"].strip()
             and not (p.get("isError") or p.get("isReasoning") or p.get("isCommentary"))]
    final = "\n".join(shown) or ("" if failed_payload else meta.get("finalAssistantVisibleText") or "")
    envelope = {"ok": status == "ok", "status": status, "final": final,
                "assistantTurns": agent.get("assistantTurns", 0), "toolSummary": meta.get("toolSummary") or {},
                "sessionId": agent.get("sessionId") or ""}
    if status != "ok":
        envelope["error"] = meta.get("error") or {"message": (failed_payload or {}).get("text") or status}
    return envelope


def inspect_result(run: HarnessRun, stdout: str) -> None:
    """Read the JSON result `openclaw agent exec --json` (or `agent --local --json`) prints."""
    result = _result_object(stdout)
    if result is None:
        if run.exit_code != 0:
            run.error = "openclaw printed no result (see stderr_tail)"
        return
    result = exec_envelope(result)
    tools = result.get("toolSummary") or {}
    run.info.update({"status": str(result.get("status", "")),
                     "tool_calls": str(tools.get("calls", 0)),
                     "turns": str(result.get("assistantTurns", 0))})
    if result.get("sessionId"):
        run.info["session_id"] = str(result["sessionId"])
    if result.get("final"):
        run.info["last_message"] = str(result["final"])[-2000:]
    if not result.get("ok", run.exit_code == 0):
        error = result.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else str(error)
        run.error = f"openclaw: {(message or result.get('status') or 'failed')[:2000]}"
