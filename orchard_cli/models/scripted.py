"""A scripted model endpoint for tests: a real OpenAI-compatible HTTP server on loopback that
replays a fixed list of replies (chat completions and Responses, streamed or not).

    ep = ScriptedEndpoint(["hello", {"tool_calls": [{"name": "exec", "arguments": {"cmd": "ls"}}]}])
    info = ep.start()      # info.base_url == "http://127.0.0.1:<port>/v1"
    ...
    ep.stop()

Each request consumes the next reply; when the list runs out the server answers 400 (or starts
over with `cycle=True`). `ScriptedReply` also injects faults: an error status, slow chunks, a
stream cut after N chunks, an answer that never comes. Run it as its own process with
`python -m orchard_cli.models.scripted --port 8000 --reply hi --cycle`.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.models.base import Dialect, EndpointInfo
from orchard_cli.models.serving import LoopbackEndpoint, run_foreground


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Function (tool) name.")
    arguments: str | dict[str, Any] = Field(default_factory=dict, description="JSON arguments.")
    id: str | None = Field(None, description="Tool call id; generated when omitted.")


class ScriptedReply(BaseModel):
    """One model turn to replay, plus optional faults."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field("", description="Assistant text.")
    reasoning: str | None = Field(None, description="Reasoning text (chat `reasoning_content`).")
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list, description="Tool calls to make.")
    finish_reason: str | None = Field(None, description="Default: tool_calls when there are any, else stop.")
    echo: bool = Field(False, description="Answer 'echo: <last user text>' instead of `content`.")
    status: int = Field(200, description="Answer this HTTP error status instead of a completion.")
    delay_s: float = Field(0.0, ge=0, description="Wait this long before answering.")
    chunk_delay_s: float = Field(0.0, ge=0, description="Wait this long between streamed chunks.")
    cut_after_chunks: int | None = Field(None, ge=0, description="Drop the connection after N SSE blocks.")
    hang: bool = Field(False, description="Never answer (until the server stops).")


def _as_reply(item: ScriptedReply | dict[str, Any] | str) -> ScriptedReply:
    if isinstance(item, ScriptedReply):
        return item
    if isinstance(item, str):
        return ScriptedReply(content=item)
    return ScriptedReply.model_validate(item)


class ScriptedEndpoint(LoopbackEndpoint):
    """Registered as the model endpoint `scripted`."""

    server_name = "orchard-scripted"
    grace_s = 0.2

    def __init__(
        self,
        replies: Sequence[ScriptedReply | dict[str, Any] | str] = (),
        *,
        model: str = "scripted",
        dialects: Sequence[Dialect] = ("chat", "responses"),
        key_env: str | None = None,
        cycle: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(host=host, port=port, key_env=key_env)
        self.replies = [_as_reply(r) for r in replies] or [ScriptedReply(echo=True)]
        self.model = model
        self.dialects = list(dialects)
        self.cycle = cycle or not replies
        self.served = 0
        self.requests: list[dict[str, Any]] = []  # what the server received (in memory only)

    def next_reply(self) -> ScriptedReply | None:
        if self.served >= len(self.replies) and not self.cycle:
            return None
        reply = self.replies[self.served % len(self.replies)]
        self.served += 1
        return reply

    def reply_for(self, headers: Any, chat: dict[str, Any]) -> ScriptedReply | None:
        """The app's question: the next reply, whatever the request."""
        return self.next_reply()

    def exhausted_message(self) -> str:
        return f"scripted endpoint: script exhausted after {self.served} replies"

    def app(self) -> Any:
        from orchard_cli.models.scripted_app import build_app

        return build_app(self)

    def info(self, root: str) -> EndpointInfo:
        return EndpointInfo(name="scripted", base_url=f"{root}/v1", model=self.model,
                            dialects=self.dialects, key_env=self.key_env)


def main(argv: list[str] | None = None) -> None:
    """Serve a scripted endpoint in the foreground (used by benchmarks and by hand)."""
    parser = argparse.ArgumentParser(prog="python -m orchard_cli.models.scripted")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--reply", action="append", default=[], help="a reply text (repeatable)")
    parser.add_argument("--cycle", action="store_true", help="start the replies over when they run out")
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between streamed chunks")
    parser.add_argument("--chat-only", action="store_true", help="do not serve /v1/responses")
    args = parser.parse_args(argv)
    replies = [ScriptedReply(content=r, chunk_delay_s=args.chunk_delay) for r in args.reply]
    endpoint = ScriptedEndpoint(replies or [ScriptedReply(echo=True, chunk_delay_s=args.chunk_delay)],
                                cycle=args.cycle, dialects=("chat",) if args.chat_only else ("chat", "responses"))

    def ready(url: str) -> None:
        print(f"{url}/v1", flush=True)

    run_foreground(endpoint.app, host=args.host, port=args.port, on_ready=ready)


if __name__ == "__main__":  # pragma: no cover
    main()
