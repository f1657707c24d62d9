"""The weight sync: after every update, the policy that rollouts sample from gets the learner's
weights. Version N is the policy after N updates (0: the starting weights); the rollouts of step N
sample version N-1, and every call a server answers says which version produced it (the recorded
call's `weight_version`, when the server reports one: `orchard serve` does).

- `InProcess` (`orchard rl` without --base-url): the served copy in this process gets the
  learner's weights, copied in place between generations.
- `LoraPush` (`--base-url URL... --sync lora`): the LoRA adapter is saved to DIR/adapters/vN and
  each server loads it through `POST /v1/load_lora_adapter` ({"lora_name", "lora_path",
  "load_inplace": true}: vLLM's API, which needs `vllm serve --enable-lora` with
  `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`; SGLang serves the same route without /v1; `orchard serve
  --enable-lora`). The adapter keeps one name, so the next rollouts request that name.
- `CheckpointPush` (`--sync checkpoint`): the whole model is saved to DIR/weights/vN (safetensors)
  and each server reloads it through `POST /update_weights_from_disk` ({"model_path",
  "weight_version"}: SGLang's API; `orchard serve --enable-weight-updates`).

The servers read the folders by path: with servers on other machines, DIR must be on a filesystem
they see at the same path. Every process calls `push` (under FSDP gathering the weights is a
collective); rank 0 writes the folders and calls the servers. Only the two newest folders are kept.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from orchard_cli.errors import InfraError

ADAPTER_NAME = "orchard-policy"
TIMEOUT_S = 600.0  # loading a large checkpoint takes minutes


def server_root(base_url: str) -> str:
    """http://host:port of an OpenAI base URL (http://host:port/v1)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _post(url: str, body: dict[str, Any], key: str | None) -> Any:
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        return httpx.post(url, json=body, headers=headers, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise InfraError(f"weight sync: {url} did not answer ({type(exc).__name__}: {exc})",
                         hint="is the policy server still running?") from None


def served_model(base_url: str, key: str | None) -> str:
    """The first model a server lists (GET /v1/models)."""
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        reply = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=30)
        reply.raise_for_status()
        return str(reply.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise InfraError(f"--base-url {base_url}: cannot list its models ({type(exc).__name__}: {exc})",
                         hint="start the server first (orchard serve, vllm serve, sglang) and pass its /v1 URL") from None


def _prune(folder: Path, keep: int = 2) -> None:
    for old in sorted(folder.glob("v*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


class InProcess:
    """The served copy in this process (rank 0's)."""

    kind = "in-process"

    def __init__(self, learner: Any, served: Any) -> None:
        self.learner, self.served = learner, served

    def model_name(self) -> str | None:
        return None

    def push(self, version: int) -> float:
        started = time.perf_counter()
        state = self.learner.full_state()
        if self.served is not None and state is not None:
            self.served.load_weights_from(state, version=str(version))
        return time.perf_counter() - started


class LoraPush:
    """The adapter to every server, through vLLM's runtime LoRA API."""

    kind = "lora"

    def __init__(self, learner: Any, urls: list[str], out: Path, key: str | None, name: str = ADAPTER_NAME) -> None:
        self.learner, self.urls, self.key, self.name = learner, urls, key, name
        self.folder = out / "adapters"

    def model_name(self) -> str:
        return self.name

    def push(self, version: int) -> float:
        started = time.perf_counter()
        state = self.learner.full_state(trainable_only=True)
        if state is None:  # not rank 0
            return 0.0
        target = self.folder / f"v{version:06d}"
        shutil.rmtree(target, ignore_errors=True)
        self.learner.model.save_pretrained(target, state_dict=state)
        for url in self.urls:
            self._load(url, target, version)
        _prune(self.folder)
        return time.perf_counter() - started

    def _load(self, url: str, path: Path, version: int) -> None:
        body = {"lora_name": self.name, "lora_path": str(path.resolve()), "load_inplace": True,
                "weight_version": str(version)}
        base = url.rstrip("/")
        reply = _post(f"{base}/load_lora_adapter", body, self.key)
        if reply.status_code == 404 and server_root(url) != base:  # SGLang serves it without /v1
            base = server_root(url)
            reply = _post(f"{base}/load_lora_adapter", body, self.key)
        if reply.status_code == 400 and "already" in reply.text.lower():  # a server without load_inplace
            _post(f"{base}/unload_lora_adapter", {"lora_name": self.name}, self.key)
            reply = _post(f"{base}/load_lora_adapter", body, self.key)
        if reply.status_code != 200:
            raise InfraError(f"weight sync: {url} refused the adapter ({reply.status_code}: {reply.text[:200].strip()})",
                             hint="serve the policy with runtime LoRA loading on: vllm serve MODEL --enable-lora "
                                  "(VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), or orchard serve --enable-lora")


class CheckpointPush:
    """The whole model to every server, through SGLang's `update_weights_from_disk`."""

    kind = "checkpoint"

    def __init__(self, learner: Any, urls: list[str], out: Path, key: str | None, tokenizer: Any,
                 name: str) -> None:
        self.learner, self.urls, self.key, self.tokenizer, self.name = learner, urls, key, tokenizer, name
        self.folder = out / "weights"

    def model_name(self) -> str:
        return self.name

    def push(self, version: int) -> float:
        started = time.perf_counter()
        state = self.learner.full_state()
        if state is None:
            return 0.0
        target = self.folder / f"v{version:06d}"
        shutil.rmtree(target, ignore_errors=True)
        self.learner.model.save_pretrained(target, state_dict=state)
        self.tokenizer.save_pretrained(target)
        for url in self.urls:
            body = {"model_path": str(target.resolve()), "weight_version": str(version)}
            reply = _post(f"{server_root(url)}/update_weights_from_disk", body, self.key)
            ok = reply.status_code == 200
            if ok:
                try:
                    ok = bool(reply.json().get("success", True))
                except ValueError:
                    pass
            if not ok:
                raise InfraError(f"weight sync: {url} did not reload the weights ({reply.status_code}: "
                                 f"{reply.text[:200].strip()})",
                                 hint="--sync checkpoint needs POST /update_weights_from_disk (SGLang; orchard "
                                      "serve --enable-weight-updates); with vLLM use --sync lora")
        _prune(self.folder)
        return time.perf_counter() - started
