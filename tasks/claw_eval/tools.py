"""A Claw-Eval task's tools on orchard's tool surface: each call forwarded to its `tool_endpoints`
entry (HTTP to the task's mock service, as Claw-Eval's own dispatcher does), so every call is a
recorded `Dispatch`. Tools without an endpoint are left out (the harness's own shell and file
tools stand in for Claw-Eval's built-in sandbox tools)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from orchard_cli.tools import ToolReply, ToolSession, ToolSpec

from orchard_cli.tasks.claw_eval.services import ServiceSet


def _schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    schema = dict(schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def tool_specs(definition: dict[str, Any]) -> list[ToolSpec]:
    endpoints = {e["tool_name"]: e for e in definition.get("tool_endpoints") or ()}
    services = {int(s["port"]): s["name"] for s in definition.get("services") or ()}
    specs = []
    for tool in definition.get("tools") or ():
        endpoint = endpoints.get(tool["name"])
        if endpoint is None:
            continue
        port = httpx.URL(endpoint["url"]).port
        specs.append(ToolSpec(name=tool["name"], description=tool.get("description") or tool["name"],
                              input_schema=_schema(tool.get("input_schema")),
                              service=services.get(port or 0, "http"), action=tool["name"]))
    return specs


class HttpToolBackend:
    """`ToolBackend`: POST (or the endpoint's method) the arguments as JSON to the mock service."""

    def __init__(self, definition: dict[str, Any], services: ServiceSet) -> None:
        self.endpoints = {e["tool_name"]: e for e in definition.get("tool_endpoints") or ()}
        self.services = services

    def call(self, service: str, action: str, arguments: dict[str, Any]) -> ToolReply:
        endpoint = self.endpoints[action]
        reply = self.services.client.request(endpoint.get("method") or "POST", self.services.url(endpoint["url"]),
                                             json=arguments, timeout=30.0)
        try:
            body: Any = reply.json()
        except json.JSONDecodeError:
            body = reply.text
        if reply.status_code < 400:
            return ToolReply(ok=True, status=reply.status_code, result=body)
        return ToolReply(ok=False, status=reply.status_code, result=body,
                         error=body if isinstance(body, str) else json.dumps(body, ensure_ascii=False))


def session(definition: dict[str, Any], services: ServiceSet) -> ToolSession | None:
    specs = tool_specs(definition)
    return ToolSession(specs, HttpToolBackend(definition, services)) if specs else None
