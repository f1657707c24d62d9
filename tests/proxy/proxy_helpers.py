"""Helpers shared by the proxy tests (imported as `proxy_helpers`)."""

from __future__ import annotations

import json
from typing import Any

import httpx


def client(episode) -> httpx.Client:
    """What a harness does: the episode's base URL and token as its OpenAI base URL and key."""
    return httpx.Client(base_url=episode.base_url, timeout=30,
                        headers={"Authorization": f"Bearer {episode.api_key}"})


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
