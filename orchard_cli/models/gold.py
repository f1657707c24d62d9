"""`gold`: the demonstrator teacher. An in-package endpoint (beside `smollm2` and `scripted`) that
plays each task's reference solution as the model's turns, through the real harness:

    orchard distill claw-mini --base-url gold --harness bash --out demos.jsonl

so the recorded trajectory is exactly what a teacher's would be (the proxy records the calls, the
tools record their dispatches, the family collects the evidence and grades it), in the harness's
own format (gold_moves.py: `task-tool` command lines for orchard's bash agent, MCP tool calls for
OpenClaw and Codex, BrowserGym actions for orchard's web agent, the answer as the last message).

How it knows the task of a call. An endpoint sees only HTTP requests. The agent solver tells gold
each episode's reference before the harness starts (`begin_episode(episode_id, reference,
tools)`: the episode's `reference("gold")`, read once it is set up, so MiniWoB's per-episode
steps are the ones of that episode), and the recording proxy, which knows the episode of every
call by its per-episode token, names it in the `X-Orchard-Episode` header of each call it
forwards (it does so only for endpoints that ask: `wants_episode`). Each call answers with the
episode's next move; a call of an episode gold was not told about, or past the reference's last
move, is answered 400, and the episode's `GoldReport` (from `end_episode`) says what went wrong.
A task without a reference is refused before anything runs (`rollout.choose.require_references`).

`near-miss` (NearMissEndpoint) is the same demonstrator playing each task's near miss instead (the
family's `near_miss`: the right procedure with a wrong last step, e.g. the wrong month's total):
demonstrations that look like a teacher's and do not resolve, for the recipe's near-miss control.

Web steps name elements by selector; the web agent names them by the page's ids. When the
episode's tools are a browser (`tools.backend.locate`), gold asks it for the id of the element a
selector finds on the page the agent was last shown.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from orchard_cli.models.base import Dialect, EndpointInfo
from orchard_cli.models.gold_moves import Move, MoveError, moves_of, reply
from orchard_cli.models.serving import LoopbackEndpoint

EPISODE_HEADER = "X-Orchard-Episode"


@dataclass
class GoldReport:
    """How one episode's demonstration went."""

    episode_id: str
    moves: int
    played: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.played >= self.moves and not self.errors


@dataclass
class _Script:
    moves: list[Move]
    report: GoldReport
    locate: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _locator(tools: Any) -> Any:
    backend = getattr(tools, "backend", None)
    return getattr(backend, "locate", None)


class GoldEndpoint(LoopbackEndpoint):
    """Registered as the model endpoint `gold`."""

    server_name = "orchard-gold"
    endpoint_name = "gold"
    grace_s = 0.2
    wants_episode = True
    """The recording proxy names each call's episode in the `X-Orchard-Episode` header."""
    plays = "gold"
    """The reference this endpoint plays (EpisodeEnv.reference's kind: gold, near_miss)."""

    def __init__(self, *, model: str = "gold", dialects: Sequence[Dialect] = ("chat", "responses"),
                 key_env: str | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host=host, port=port, key_env=key_env)
        self.model = model
        self.dialects = list(dialects)
        self.served = 0
        self.requests: list[dict[str, Any]] = []
        self._scripts: dict[str, _Script] = {}
        self._lock = threading.Lock()
        self._last_error = ""

    # -- the agent solver's side --------------------------------------------------------------
    def begin_episode(self, episode_id: str, reference: Mapping[str, Any], tools: Any = None) -> None:
        """From now on, calls of `episode_id` get the moves of `reference` (a `Gold` as data)."""
        moves = moves_of(dict(reference))
        script = _Script(moves, GoldReport(episode_id, len(moves)), _locator(tools))
        with self._lock:
            self._scripts[episode_id] = script

    def end_episode(self, episode_id: str) -> GoldReport | None:
        """Forget the episode; what was played of it (None when gold never heard of it)."""
        with self._lock:
            script = self._scripts.pop(episode_id, None)
        return script.report if script is not None else None

    # -- the app's side -----------------------------------------------------------------------
    def reply_for(self, headers: Mapping[str, str], chat: dict[str, Any]) -> Any:
        from orchard_cli.models.scripted import ScriptedReply, ScriptedToolCall

        episode = headers.get(EPISODE_HEADER, "")
        with self._lock:
            script = self._scripts.get(episode)
        if script is None:
            self._last_error = (f"gold: no reference for episode {episode!r}" if episode else
                                f"gold: the call does not name its episode ({EPISODE_HEADER}); gold answers "
                                "only through orchard's recording proxy")
            return None
        with script.lock:
            if script.report.played >= len(script.moves):
                error = f"gold: the reference has no move left after {script.report.played}"
                script.report.errors.append(error)
                self._last_error = error
                return None
            move = script.moves[script.report.played]
            try:
                content, calls = reply(move, chat, script.locate)
            except MoveError as exc:
                error = f"gold: move {script.report.played + 1} of {len(script.moves)}: {exc}"
                script.report.errors.append(error)
                return ScriptedReply(status=422, content=error)
            script.report.played += 1
        self.served += 1
        return ScriptedReply(content=content, tool_calls=[ScriptedToolCall(name=n, arguments=a) for n, a in calls])

    def exhausted_message(self) -> str:
        return self._last_error or f"{self.endpoint_name}: nothing to say"

    def app(self) -> Any:
        from orchard_cli.models.scripted_app import build_app

        return build_app(self)

    def info(self, root: str) -> EndpointInfo:
        return EndpointInfo(name=self.endpoint_name, base_url=f"{root}/v1", model=self.model, dialects=self.dialects,
                            key_env=self.key_env)


class NearMissEndpoint(GoldEndpoint):
    """Registered as the model endpoint `near-miss`: each task's near miss, played like gold."""

    server_name = "orchard-near-miss"
    endpoint_name = "near-miss"
    plays = "near_miss"

    def __init__(self, *, model: str = "near-miss", **options: Any) -> None:
        super().__init__(model=model, **options)
