"""Start the recording proxy: in a background thread for a run (`start_proxy`), or in the
foreground for `orchard proxy` (`serve_proxy`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from orchard_cli.models import ModelEndpoint, resolve_endpoint
from orchard_cli.models.base import Dialect
from orchard_cli.proxy.config import ProxyConfig
from orchard_cli.proxy.routes import Episode

if TYPE_CHECKING:
    from orchard_cli.models.serving import BackgroundServer
    from orchard_cli.proxy.server import ProxyServer


def _missing_aiohttp(exc: ModuleNotFoundError) -> Exception:
    from orchard_cli.errors import MissingDependencyError

    return MissingDependencyError("the recording proxy needs aiohttp, which is not installed",
                                  hint="pip install 'orchard-cli[proxy]'")


class ProxyHandle:
    """A running proxy. Give each harness run its own episode:

        with start_proxy("http://127.0.0.1:8000/v1", key_env="OPENAI_API_KEY") as proxy:
            ep = proxy.open_episode("task-1", max_calls=50)
            run_harness(base_url=ep.base_url, api_key=ep.api_key)   # the token, not the real key
            summary = ep.close()
            records = ep.records
    """

    def __init__(self, server: ProxyServer, background: BackgroundServer,
                 owned: ModelEndpoint | None) -> None:
        self._server, self._background, self._owned = server, background, owned
        self.config = server.config
        self.url: str = server.root_url
        self._count = 0

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of the proxy itself (calls need an episode token as their key)."""
        return f"{self.url}/v1"

    def open_episode(self, episode_id: str | None = None, *, max_calls: int | None = None,
                     max_tokens: int | None = None, tools: Any = None) -> Episode:
        """A new episode with its own token and route; caps default to the proxy's. `tools` (a
        `orchard_cli.tools.ToolSession`) is served to the episode at `<episode>/tools`."""
        self._count += 1
        return self._server.open_episode(episode_id or f"ep-{self._count:05d}",
                                         max_calls=max_calls, max_tokens=max_tokens, tools=tools)

    @property
    def episodes(self) -> list[Episode]:
        """Episodes still open."""
        return list(self._server.episodes.values())

    def stop(self) -> None:
        """Stop serving, close every open episode, flush the calls file, stop an owned upstream."""
        for episode in list(self._server.episodes.values()):
            episode.close(timeout=5.0)
        self._background.stop()
        if self._owned is not None:
            self._owned.stop()

    def __enter__(self) -> ProxyHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def configure(upstream: str | ModelEndpoint, key_env: str | None,
               upstream_dialects: Sequence[Dialect] | None,
               options: dict[str, Any]) -> tuple[ProxyConfig, str | None, ModelEndpoint | None]:
    owned = None
    if isinstance(upstream, str):
        endpoint = resolve_endpoint(upstream, key_env=key_env) if key_env else resolve_endpoint(upstream)
        owned = endpoint
    else:
        endpoint = upstream
    info = endpoint.start()
    try:
        key = endpoint.api_key()
        config = ProxyConfig(upstream_url=info.base_url, key_env=info.key_env,
                             upstream_dialects=list(upstream_dialects or info.dialects),
                             model=options.pop("model", None) or None, **options)
    except Exception:
        if owned is not None:
            owned.stop()
        raise
    return config, key, owned


def start_proxy(
    upstream: str | ModelEndpoint,
    *,
    key_env: str | None = None,
    upstream_dialects: Sequence[Dialect] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    out: Path | str | None = None,
    **options: Any,
) -> ProxyHandle:
    """Run the recording proxy in a background thread and return its handle.

    `upstream` is a URL (an OpenAI-compatible endpoint whose key is in the variable `key_env`),
    a registry name (`scripted`), or a `ModelEndpoint` (started if needed, not stopped here).
    `options` are the other `ProxyConfig` fields (max_calls, max_tokens, model, extra_body,
    max_retries, retry_backoff_s, connect_timeout_s, read_timeout_s, auto_episodes).
    """
    try:
        from orchard_cli.models.serving import BackgroundServer
        from orchard_cli.proxy.server import ProxyServer
    except ModuleNotFoundError as exc:
        raise _missing_aiohttp(exc) from exc
    config, key, owned = configure(upstream, key_env, upstream_dialects,
                                    {"host": host, "port": port, "out": Path(out) if out else None, **options})
    server = ProxyServer(config, key)
    background = BackgroundServer(server.app, host=config.host, port=config.port, name="orchard-proxy")
    try:
        server.root_url = background.start()
    except Exception:
        if server.writer is not None:
            server.writer.close()
        if owned is not None:
            owned.stop()
        raise
    return ProxyHandle(server, background, owned)


def serve_proxy(config: ProxyConfig, api_key: str | None, on_ready: Callable[[str], None]) -> None:
    """Serve in the foreground until SIGINT/SIGTERM (standalone `orchard proxy`)."""
    try:
        from orchard_cli.models.serving import run_foreground
        from orchard_cli.proxy.server import ProxyServer
    except ModuleNotFoundError as exc:
        raise _missing_aiohttp(exc) from exc
    server = ProxyServer(config, api_key)

    def ready(url: str) -> None:
        server.root_url = url
        on_ready(url)

    run_foreground(server.app, host=config.host, port=config.port, on_ready=ready)
