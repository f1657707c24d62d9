"""The model that plays a multi-turn task's user (`--user-model M --user-base-url U`).

After each of the agent's turns, the user model reads the conversation so far (the user's messages
and the agent's replies, as text) and writes the user's next message in the role the task's
`SimulatedUser.persona` gives it, or `[DONE]` when it has nothing more to ask. Its calls go
through a recording proxy of their own (one episode per reply, `<episode>-user-<n>`), so they are
recorded like the agent's, apart from them: they are the environment's, never the policy's. orchard
is a model client here, so it uses the official `openai` package.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchard_cli.family import SimulatedUser

DONE = "[DONE]"
SYSTEM = ("You play the user in a conversation with an AI assistant. You are the person described below, "
          "not an AI, and you stay in that role. Answer the assistant's questions from what the description "
          "says; for a detail it does not give, say you are not sure. Give details a little at a time, when "
          "they are asked for. Write one to three short sentences, as that person would type them. When the "
          f"assistant has done what you asked and you have nothing more to ask, reply with exactly {DONE}.\n\n"
          "Who you are:\n{persona}")
NEXT = "The conversation so far:\n\n{transcript}\n\nWrite your next message to the assistant, or " + DONE + "."
TEMPERATURE = 0.7
"""As Claw-Eval's own simulated user."""
MAX_TOKENS = 1024


class UserConfig(BaseModel):
    """`--user-model M --user-base-url U` (the key from `--user-key-env`, default OPENAI_API_KEY)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    base_url: str
    key_env: str | None = None
    timeout_seconds: float = 120.0


@dataclass
class UserTurn:
    """One reply of the user model: its text (None: the user is done, or could not answer)."""

    text: str | None
    error: str | None = None
    records: list[Any] = field(default_factory=list)


def transcript(turns: list[tuple[str, str]], mark: str = "") -> str:
    """(role, text) pairs as the user model reads them: `User: ...` / `Assistant: ...`."""
    lines = []
    for role, text in turns:
        if role == "user" and mark and text.startswith(mark):
            text = text[len(mark):]
        lines.append(f"{'User' if role == 'user' else 'Assistant'}: {text.strip()}")
    return "\n\n".join(lines)


class UserModel:
    """Thread-safe: one proxy in front of the user model, started on first use, one episode per reply."""

    def __init__(self, config: UserConfig) -> None:
        from orchard_cli.rollout.agent import Upstream

        self.config = config
        self.upstream = Upstream(config.base_url, config.key_env)
        self._proxy: Any = None
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"{self.config.model}@{self.upstream.describe()}"

    def proxy(self) -> Any:
        with self._lock:
            if self._proxy is None:
                self._proxy = self.upstream.start_proxy(self.config.model, upstream_dialects=["chat"])
            return self._proxy

    def reply(self, user: SimulatedUser, turns: list[tuple[str, str]], episode_id: str,
              timeout: float | None = None) -> UserTurn:
        """The user's next message after `turns`; None when it says it is done. A model that fails
        (an error, an empty reply) ends the conversation, with the reason. The proxy retries a
        failed upstream call itself; the client does not (one call per reply)."""
        import openai

        limit = max(1.0, min(self.config.timeout_seconds, timeout if timeout is not None else self.config.timeout_seconds))
        episode = self.proxy().open_episode(episode_id, max_calls=1)
        messages = [{"role": "system", "content": SYSTEM.replace("{persona}", user.persona.strip())},
                    {"role": "user", "content": NEXT.format(transcript=transcript(turns, user.mark))}]
        try:
            client = openai.OpenAI(base_url=episode.base_url, api_key=episode.api_key, max_retries=0,
                                   timeout=limit)
            answer = client.chat.completions.create(model=self.config.model, messages=messages,  # type: ignore[arg-type]
                                                    temperature=TEMPERATURE, max_tokens=MAX_TOKENS)
            text = (answer.choices[0].message.content or "").strip()
            error = None if text else "the user model replied with nothing"
        except Exception as exc:  # noqa: BLE001 - the conversation ends, the reason is kept
            text, error = "", f"the user model failed: {type(exc).__name__}: {str(exc)[:300]}"
        finally:
            episode.close(timeout=5.0)
        done = not text or DONE in text
        return UserTurn(text=None if done else text, error=error, records=episode.records)

    def stop(self) -> None:
        with self._lock:
            proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.stop()
        self.upstream.stop()
