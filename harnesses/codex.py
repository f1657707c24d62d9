"""`codex`: the real Codex CLI (`codex exec`), headless, inside the sandbox, on orchard's Node.

Codex speaks only the Responses API (`POST {base_url}/responses`, always streamed); the recording
proxy serves it. Its tools are cut to plain functions (`exec_command`) by disabling multi-agent,
goals and web search. CODEX_HOME and HOME are a private folder in the sandbox's /tmp, so nothing
lands in the workspace but the agent's own changes.

Codex has one silent failure: a Responses stream whose output items lack
`response.output_item.done` makes it exit 0 having done nothing. `run()` reads its `--json` events
and reports a run that ended without a single item (no command, no message) as an error.

A task's tools come in as an MCP server (`mcp_servers.<server_name>`, stdio, orchard's
mcp_server.mjs on orchard's Node), its tools approved without asking; Codex shows them to the
model as `mcp__<server_name>__<tool>`.

Continuing a conversation (`multi_turn`): with `HarnessContext.session` set, Codex keeps its
session (no `--ephemeral`; CODEX_HOME survives between runs in one sandbox), and the thread id of
its `thread.started` event is noted in CODEX_HOME (`orchard-sessions/<session>`) and in
`run.info["thread_id"]`. A resumed turn runs `codex exec -C <workdir> resume <options> -- <thread
id> <message>` with the same provider, model and MCP options, so the history and the tools carry
on. By id rather than `--last`, which takes the newest session of the cwd, whoever started it.
"""

from __future__ import annotations

import json
import shlex

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import Mount
from orchard_cli.harnesses.base import HarnessContext, HarnessRun
from orchard_cli.harnesses.common import (check_tools, headless, mcp_launch, not_ready, read_note, run_command,
                                         session_note, tools_mounts, write_note)
from orchard_cli.harnesses.install import CODEX, NODE, missing, package_mounts

HOME = "/tmp/codex-home"
KEY_VAR = "ORCHARD_API_KEY"
PROVIDER = "orchard"
ARGV_PROMPT_LIMIT = 100_000
"""Longer prompts go through stdin (one argv string may not exceed 128 KiB on Linux)."""
MCP_STARTUP_SECONDS = 60
MCP_TOOL_SECONDS = 300
ACTION_ITEMS = {"command_execution", "agent_message", "file_change", "reasoning", "mcp_tool_call",
                "todo_list", "web_search"}
SILENT_NOOP = ("codex exited 0 without a tool call or a message: the model's answer never reached "
               "it (a Responses stream lacking response.output_item.done does this)")


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string of printable text is a TOML basic string


def _toml_strings(values: list[str]) -> str:
    return "[" + ",".join(_toml_string(v) for v in values) + "]"


def mcp_overrides(context: HarnessContext) -> list[str]:
    """The `-c` overrides that load the task's tools (none without tools)."""
    if context.tools is None:
        return []
    launch, key = mcp_launch(context.tools), f"mcp_servers.{context.tools.server_name}"
    env = "{" + ",".join(f"{name}={_toml_string(value)}" for name, value in launch.env.items()) + "}"
    overrides = [f"command={_toml_string(launch.command)}", f"args={_toml_strings(launch.args)}", f"env={env}",
                 "required=true", f"startup_timeout_sec={MCP_STARTUP_SECONDS}",
                 f"tool_timeout_sec={MCP_TOOL_SECONDS}", 'default_tools_approval_mode="approve"']
    return [arg for override in overrides for arg in ("-c", f"{key}.{override}")]


class Codex:
    name = "codex"
    multi_turn = True

    def check(self) -> list[str]:
        return missing(NODE, CODEX)

    def version(self) -> str | None:
        return CODEX.installed_version()

    def mounts(self) -> list[Mount]:
        harness = package_mounts(NODE, CODEX)
        return harness + tools_mounts(mcp=True) if harness else []   # nothing to run, nothing to bind

    def argv(self, context: HarnessContext, workdir: str, *, prompt_on_stdin: bool = False,
             thread: str | None = None) -> list[str]:
        """`codex exec` for a new conversation, `codex exec resume ... -- <thread>` to continue one."""
        provider = (f"{{name={_toml_string(PROVIDER)},base_url={_toml_string(context.base_url)},"
                    f"env_key={_toml_string(KEY_VAR)},wire_api=\"responses\"}}")
        head = [NODE.sandbox_entry(), CODEX.sandbox_entry(), "exec"]
        if thread is not None:   # `resume` takes no -C of its own: it is exec's, given before it
            head += ["-C", workdir, "resume"]
        options = ["--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                    *([] if context.session else ["--ephemeral"]), "--json",
                    *([] if thread is not None else ["-C", workdir]), "-m", context.model,
                    "-c", f"model_provider={_toml_string(PROVIDER)}",
                    "-c", f"model_providers.{PROVIDER}={provider}",
                    "--disable", "multi_agent", "--disable", "goals", "-c", 'web_search="disabled"',
                    *mcp_overrides(context)]
        prompt = ["-"] if prompt_on_stdin else ["--", context.prompt]
        if thread is not None:
            prompt = [thread, "-"] if prompt_on_stdin else ["--", thread, context.prompt]
        return head + options + prompt

    def command(self, context: HarnessContext, workdir: str, thread: str | None = None) -> str:
        needs = [NODE.sandbox_entry(), CODEX.sandbox_entry()]
        if len(context.prompt.encode()) <= ARGV_PROMPT_LIMIT:
            return headless(self.argv(context, workdir, thread=thread), home=HOME, needs=needs)
        line = headless(self.argv(context, workdir, prompt_on_stdin=True, thread=thread), home=HOME, needs=needs)
        return line.removesuffix("</dev/null") + f"<{shlex.quote(HOME + '/prompt.txt')}"

    def run(self, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
        problems = self.check() + check_tools(context)
        if problems:
            return not_ready(problems)
        thread = None
        if context.resume:
            thread = read_note(sandbox, session_note(HOME, context.session or ""))
            if thread is None:
                return HarnessRun(exit_code=None, error=f"no Codex thread of conversation {context.session!r} "
                                                        "in this sandbox: its first turn did not run here")
        if len(context.prompt.encode()) > ARGV_PROMPT_LIMIT:
            try:
                sandbox.write_file(f"{HOME}/prompt.txt", context.prompt)
            except Exception as exc:  # noqa: BLE001 - returned, never raised
                return HarnessRun(exit_code=None, error=f"could not write the prompt into the sandbox: {exc}")
        env = {"CODEX_HOME": HOME, "HOME": HOME, KEY_VAR: context.api_key, "NO_COLOR": "1"}
        run = run_command(sandbox, self.command(context, sandbox.workdir, thread), timeout=context.timeout_seconds,
                          env=env, inspect=inspect_session if context.session else inspect_events)
        if context.session:
            keep_thread(sandbox, context.session, run)
        return run


def keep_thread(sandbox: SandboxHandle, session: str, run: HarnessRun) -> None:
    """Note the run's thread id for the next turn of `session` (and in `run.info`)."""
    thread = run.info.get("thread_id") or thread_started(run.stdout_tail)  # a killed run is not inspected
    if thread:
        run.info.update(thread_id=thread, session=session)
        write_note(run, sandbox, session_note(HOME, session), thread)


def inspect_session(run: HarnessRun, stdout: str) -> None:
    """`inspect_events`, and the thread id of a turn of a conversation (from the whole output:
    `thread.started` comes first, before the tail)."""
    inspect_events(run, stdout)
    thread = thread_started(stdout)
    if thread:
        run.info["thread_id"] = thread


def thread_started(stdout: str) -> str | None:
    """The thread id of the first `thread.started` event in `codex exec --json` output."""
    for line in stdout.splitlines():
        if line.startswith("{") and "thread.started" in line:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("type") == "thread.started" and event.get("thread_id"):
                return str(event["thread_id"])
    return None


def inspect_events(run: HarnessRun, stdout: str) -> None:
    """Read `codex exec --json` events: what it did, how the turn ended, a silent no-op."""
    counts: dict[str, int] = {}
    last_message, failure, last_error, turns = "", None, None, 0
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        kind = event.get("type")
        if kind == "item.completed":
            item = event.get("item") or {}
            counts[item.get("type", "?")] = counts.get(item.get("type", "?"), 0) + 1
            if item.get("type") == "agent_message":
                last_message = item.get("text") or ""
        elif kind == "turn.completed":
            turns += 1
        elif kind == "turn.failed":
            failure = (event.get("error") or {}).get("message") or "turn failed"
        elif kind == "error":  # also retries ("Reconnecting... 1/5"): fatal only if the run fails
            last_error = event.get("message") or "error"
    run.info.update({"tool_calls": str(counts.get("command_execution", 0) + counts.get("mcp_tool_call", 0)),
                     "messages": str(counts.get("agent_message", 0)), "turns": str(turns)})
    if counts.get("mcp_tool_call"):  # the task's own tools, over MCP
        run.info["mcp_tool_calls"] = str(counts["mcp_tool_call"])
    if last_message:
        run.info["last_message"] = last_message[-2000:]
    if failure is None and run.exit_code != 0:
        failure = last_error
    if failure is not None:
        run.error = f"codex: {failure[:2000]}"
    elif run.exit_code == 0 and not any(counts.get(kind) for kind in ACTION_ITEMS):
        run.info["silent_noop"] = "true"
        run.error = SILENT_NOOP
