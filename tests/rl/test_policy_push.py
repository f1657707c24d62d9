"""`orchard rl --base-url URL --sync lora|checkpoint` against an `orchard serve` started as a
separate process (the HTTP calls a vLLM or SGLang server receives): after every update the
server holds the learner's new weights, the next step's rollouts say they were sampled by them,
and the server's log-probabilities are the learner's (fp32)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchard_cli.main import main

pytestmark = [pytest.mark.model, pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(smollm2_home, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """`orchard serve --enable-lora --enable-weight-updates` in a subprocess: its ready line."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ORCHARD_HOME": str(smollm2_home)}
    log = tmp_path_factory.mktemp("serve") / "stderr.log"
    with log.open("w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "orchard_cli.main", "serve", "--model", "smollm2", "--port", "0",
                                 "--enable-lora", "--enable-weight-updates", "--format", "json"],
                                stdout=subprocess.PIPE, stderr=err_file, text=True, env=env)
    code = None
    try:
        line = proc.stdout.readline()
        assert line, log.read_text()
        yield {**json.loads(line), "log": log}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert code == 0, log.read_text()


def run(server: dict[str, Any], out: Path, sync: str, steps: int, group: int = 2) -> list[dict[str, Any]]:
    args = ["rl", "capitals", "--harness", "chat", "--limit", "4", "--steps", str(steps), "--tasks-per-step", "2", "-G", str(group),
            "--max-new-tokens", "6", "--lr", "1e-4", "--save-every", "10", "--base-url", server["base_url"],
            "--sync", sync, "--out", str(out), "--format", "json"]
    assert main(args) == 0, server["log"].read_text()[-2000:]
    return [json.loads(line) for line in open(out / "steps.jsonl")]


def test_lora_sync_advances_the_served_adapter_every_step(server, smollm2_home, tmp_path, monkeypatch) -> None:
    import httpx

    monkeypatch.setenv("ORCHARD_HOME", str(smollm2_home))
    # G=4: a group learns only when its rewards differ; with G=2 all six groups were sometimes
    # equal (each 0,0 or 1,1: every gradient 0; CI saw it once); G=4 makes that far rarer
    steps = run(server, tmp_path / "run", "lora", 3, group=4)
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:
        # step N sampled the adapter pushed after update N-1 (version 0: the untrained adapter)
        assert s["served_versions"] == [str(s["step"] - 1)] and s["weight_version"] == s["step"]
        assert s["logprob_gap"] is not None and s["logprob_gap"] <= 1e-4, s
        assert s["trained_tokens"] > 0 and s["sync_seconds"] > 0
    assert sorted(p.name for p in (tmp_path / "run" / "adapters").iterdir()) == ["v000002", "v000003"]
    listed = httpx.get(f"{server['base_url']}/models", timeout=30).json()["data"]
    assert [m["id"] for m in listed] == ["smollm2", "orchard-policy"]
    # the final policy: merged (what orchard serve --model takes) and the adapter
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()
    assert (tmp_path / "run" / "adapter" / "adapter_model.safetensors").is_file()
    # the adapter moved the weights: the served adapter's answer now differs from the base model's
    from safetensors.torch import load_file

    assert any(s["grad_norm"] > 0 for s in steps), f"no group had a learning signal: {steps}"
    adapter = load_file(str(tmp_path / "run" / "adapter" / "adapter_model.safetensors"))
    assert any(float(t.abs().max()) > 0 for k, t in adapter.items() if "lora_B" in k)


def test_checkpoint_sync_reloads_the_served_model(server, smollm2_home, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ORCHARD_HOME", str(smollm2_home))
    steps = run(server, tmp_path / "run", "checkpoint", 2)
    for s in steps:
        assert s["served_versions"] == [str(s["step"] - 1)], s
        assert s["logprob_gap"] is not None and s["logprob_gap"] <= 1e-4, s


def test_push_refusals(tmp_path, capsys) -> None:
    base = ["rl", "capitals", "--harness", "chat", "--steps", "1", "--out", str(tmp_path / "x")]
    for extra, said in ((["--base-url", "http://127.0.0.1:9/v1"], "--sync lora or --sync checkpoint"),
                        (["--sync", "lora"], "name them with --base-url"),
                        (["--sync", "both", "--base-url", "http://127.0.0.1:9/v1"], "use lora or checkpoint"),
                        (["--base-url", "localhost:8000", "--sync", "lora"], "not an http(s) URL")):
        assert main(base + extra) == 2
        assert said in capsys.readouterr().err
