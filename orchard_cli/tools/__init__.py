"""The tool surface: the tools a task declares, served to every harness the same way.

A task declares tools (`ToolSpec`: name, description, JSON-schema input, the service call behind
it). In an episode a `ToolSession` holds them with the `ToolBackend` that performs the calls (the
task family's services) and records each call as a `Dispatch`, in order. The recording proxy
serves the session to the sandbox at `/e/<token>/tools` (the episode's own token, so tool calls and
model calls land in the same episode); inside the sandbox the harness reaches it through

- MCP over stdio: `node /opt/orchard/tools/mcp_server.mjs` (the MCP TypeScript SDK), loaded by
  OpenClaw, Codex and ZeroClaw from their own config;
- a command: `python3 /opt/orchard/tools/task_tool.py NAME JSON` (a shell); orchard's bash agent
  gives its commands `task-tool NAME JSON` (task_tool.sh), answered without a process per call by
  task_tool.py's `Helper`, which the agent serves from a thread for its run.

Wire protocol of the gateway (`tools_url` = the episode's base URL without `/v1`, plus `/tools`):

    GET  {tools_url}          -> 200 {"tools": [{"name", "description", "input_schema"}]}
    POST {tools_url}/{name}   body: the arguments (a JSON object); Authorization: Bearer <token>
                              -> 200 {"ok": bool, "status": int, "result": any, "error": str|null}
                                 401 unknown or closed token, 404 unknown tool, 400 body not a
                                 JSON object; arguments over ARGUMENTS_LIMIT (1 MiB) are refused
                                 unread: 200 {"ok": false, "status": 413, ...}

Nothing here imports a task family: the families (claw, claw-eval, web) build on it.
"""

from orchard_cli.tools.spec import SANDBOX_TOOLS_DIR, ToolAccess, ToolReply, ToolSpec
from orchard_cli.tools.session import ToolBackend, ToolSession

__all__ = ["SANDBOX_TOOLS_DIR", "ToolAccess", "ToolBackend", "ToolReply", "ToolSession", "ToolSpec"]
