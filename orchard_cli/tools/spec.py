"""The tool surface's data: a tool as a task declares it, a reply, and how a harness reaches them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SANDBOX_TOOLS_DIR = "/opt/orchard/tools"
"""Where the sandbox-side programs (the MCP server, task_tool.py) are bound into a sandbox."""
HOST_TOOLS_DIR = Path(__file__).with_name("sandbox")
"""Their folder in the package (bound read-only at SANDBOX_TOOLS_DIR)."""
TOOL_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,63}$")
ARGUMENTS_LIMIT = 1 << 20
"""Bytes (UTF-8 JSON) one tool call's arguments may hold. The same limit in the gateway, the
ToolSession, mcp_server.mjs and task_tool.py (ORCHARD_TOOLS_MAX_ARGS_BYTES tells the last two);
a call over it is refused with a 413 reply the agent reads, its arguments never stored."""
DISPATCH_LOG_LIMIT = 16 << 20
"""Bytes an episode's dispatch log (arguments and results, as JSON) may hold; once it is full,
further calls are refused (429) and recorded cut, so evidence.json stays bounded."""


class ToolSpec(BaseModel):
    """One tool: what the model sees (name, description, input schema) and the call behind it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Letters, digits and underscores (every harness's tool-name rules allow these)."""
    description: str
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """A JSON schema of the arguments object."""
    service: str
    """The service that performs the call ('mail', 'calendar', ...)."""
    action: str
    """The service's operation ('send', 'search', ...)."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TOOL_NAME.match(value):
            raise ValueError(f"tool name {value!r} must be letters, digits and underscores (at most 64)")
        return value

    @field_validator("input_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError("input_schema must be a JSON schema of type 'object'")
        return value

    def public(self) -> dict[str, Any]:
        """What a harness is shown: name, description, input_schema (never the service call)."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


class ToolReply(BaseModel):
    """What a tool call returned: `ok` and a status (HTTP-like: 200, 400 bad arguments, 404 not
    found, 500 the service failed), the result (JSON), or an error message."""

    model_config = ConfigDict(extra="forbid")

    ok: bool = True
    status: int = 200
    result: Any = None
    error: str | None = None


class ToolAccess(BaseModel):
    """How a harness inside the sandbox reaches an episode's tools (HarnessContext.tools)."""

    model_config = ConfigDict(extra="forbid")

    specs: list[dict[str, Any]]
    """The tools as the model sees them (`ToolSpec.public()`)."""
    url: str
    """The gateway's `tools_url` as seen from inside the sandbox (no trailing slash)."""
    token: str
    """The episode's token (Bearer), the same as the model API key."""
    server_name: str = "task"
    """The MCP server's name in harness configs (OpenClaw shows tools as `task__<tool>`)."""
