"""The episode rig shared by the harness tests (imported as `harness_rig`): one episode run the way
the episode loop runs it, a scripted upstream, the real recording proxy, a network='proxy' sandbox
holding a small git repository, and the harness's mounts bound in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchard_cli.env import Env, SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.harnesses.base import HarnessContext
from orchard_cli.harnesses.common import sandbox_base_url
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.proxy import ProxyHandle, start_proxy

REPO = Path(__file__).resolve().parents[2]
PROMPT = "Replace the text in hello.txt with the word changed."


class Rig:
    """One episode: scripted upstream -> recording proxy -> a network='proxy' local sandbox."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.endpoint: ScriptedEndpoint | None = None
        self.proxy: ProxyHandle | None = None
        self.sandboxes: list[SandboxHandle] = []

    def start(self, replies: list[Any] | None = None, *, upstream: str | None = None,
              max_calls: int = 20, **endpoint_options: Any) -> Any:
        """Start the upstream (scripted `replies`, or a URL) and the proxy; open one episode."""
        if upstream is None:
            self.endpoint = ScriptedEndpoint(replies or [], model="scripted", **endpoint_options)
            self.proxy = start_proxy(self.endpoint, retry_backoff_s=0.01)
        else:
            self.proxy = start_proxy(upstream, upstream_dialects=["responses"], retry_backoff_s=0.01)
        self.episode = self.proxy.open_episode("harness-test", max_calls=max_calls)
        return self.episode

    def sandbox(self, harness: Any, **spec: Any) -> SandboxHandle:
        """A sandbox reaching only the episode's URL, with hello.txt committed in a git repo."""
        spec.setdefault("timeout", 900)
        sandbox = SandboxHandle.create(self.env, SandboxSpec(network="proxy", proxy_url=self.episode.base_url,
                                                             mounts=harness.mounts(), **spec))
        self.sandboxes.append(sandbox)
        sandbox.write_file(f"{sandbox.workdir}/hello.txt", "hello\n")
        setup = sandbox.exec("git init -q && git add -A && git -c user.name=t -c user.email=t@t "
                             "commit -qm base", timeout=60)
        assert setup.ok, setup
        return sandbox

    def context(self, sandbox: SandboxHandle, **fields: Any) -> HarnessContext:
        base_url = sandbox_base_url(sandbox)
        assert base_url and base_url.endswith("/v1") and "127.0.0.1" in base_url, base_url
        fields.setdefault("timeout_seconds", 180)
        return HarnessContext(prompt=fields.pop("prompt", PROMPT), model="scripted", base_url=base_url,
                              api_key=self.episode.api_key, **fields)

    def changed(self, sandbox: SandboxHandle) -> list[str]:
        """`git status` of the workspace: what the harness left there."""
        status = sandbox.exec("git status --porcelain --untracked-files=all", timeout=60)
        return sorted(line[3:] for line in status.stdout.splitlines())

    def close(self) -> None:
        for sandbox in self.sandboxes:
            try:
                sandbox.destroy()
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
        if self.endpoint is not None:  # first: a call hanging upstream then ends at once
            self.endpoint.stop()
        if self.proxy is not None:
            self.proxy.stop()
