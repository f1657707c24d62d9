"""Any OpenAI-compatible endpoint already running somewhere: vLLM, SGLang, llama.cpp, a hosted API."""

from __future__ import annotations

from orchard_cli.models.base import Dialect, EndpointInfo, normalize_base_url, read_key


class OpenAIEndpoint:
    """An endpoint orchard does not run: `start` only checks the configuration.

    The key is read from the environment variable named by `key_env` each time it is needed.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        key_env: str | None = None,
        dialects: tuple[Dialect, ...] | list[Dialect] = ("chat",),
    ) -> None:
        self.info = EndpointInfo(
            name="openai",
            base_url=normalize_base_url(base_url),
            model=model,
            dialects=list(dialects),
            key_env=key_env,
        )

    def start(self) -> EndpointInfo:
        read_key(self.info.key_env)  # fail early and clearly when the named variable is unset
        return self.info

    def stop(self) -> None:
        return None

    def api_key(self) -> str | None:
        return read_key(self.info.key_env)
