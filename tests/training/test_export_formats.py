"""The exporter registry's training formats: verl-sft rows, and what the command refuses."""

from __future__ import annotations

import json

import pytest

from orchard_cli.main import main
from orchard_cli.training.synthetic import synthetic_trajectory
from train_helpers import write_trajectories


@pytest.mark.model
def test_verl_sft_rows_are_merged_samples_in_orchards_tool_format(smollm2_dir, tmp_path, capsys) -> None:
    pd = pytest.importorskip("pandas")
    data = write_trajectories(tmp_path / "t.jsonl", [synthetic_trajectory(s, calls=3) for s in (71, 72)])
    out = tmp_path / "verl"
    assert main(["distill", "export", str(data), "--format", "verl-sft", "--model", str(smollm2_dir),
                 "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["samples"]["builder"] == "merged" and result["rows"] == 2  # one run of turns per episode
    frame = pd.read_parquet(out / "train" / "data-00000-of-00001.parquet")
    assert list(frame.columns) == ["messages", "metadata"]
    for messages, meta in zip(frame["messages"], frame["metadata"]):
        roles = [m["role"] for m in messages]
        assert roles[0] == "system" and roles[-1] == "assistant" and roles.count("assistant") == 3
        assert "bash" in messages[0]["content"]  # the tools, described where the model reads them
        assert all(isinstance(m["content"], str) for m in messages)
        assert sum("<tool_call>" in m["content"] for m in messages if m["role"] == "assistant") == 2
        assert json.loads(meta)["turns"] == 3
    assert (out / "README.md").read_text().startswith("---\nconfigs:")


def test_export_refusals(tmp_path, capsys) -> None:
    data = write_trajectories(tmp_path / "t.jsonl", [synthetic_trajectory(73, calls=1)])
    for args, said in (
        (["--format", "parquet"], "use hf, trl, verl-sft"),
        (["--format", "trl"], "--model"),
        (["--format", "hf", "--model", "smollm2"], "training formats"),
        (["--format", "trl", "--model", "smollm2", "--builder", "sometimes"], "per-call or merged"),
    ):
        assert main(["distill", "export", str(data), "--out", str(tmp_path / "x"), *args]) == 2
        err = capsys.readouterr().err
        assert said in err, (args, err)
    assert not (tmp_path / "x").exists()
