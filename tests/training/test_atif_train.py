"""`orchard train` on an ATIF trajectory file (what `orchard distill export --format atif` writes,
and what Harbor-based tools write): one step on SmolLM2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchard_cli.training.synthetic import synthetic_trajectory

ORCHARD = [sys.executable, "-m", "orchard_cli.main"]


@pytest.fixture
def trajectories(tmp_path):
    rows = [synthetic_trajectory(41, calls=3), synthetic_trajectory(42, calls=2, resolved=False)]
    path = tmp_path / "traj.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    return path, rows


@pytest.mark.model
def test_train_one_step_on_an_atif_file(trajectories, tmp_path, smollm2_cached):
    path, _ = trajectories
    out = tmp_path / "atif"
    subprocess.run([*ORCHARD, "distill", "export", str(path), "--format", "atif", "--out", str(out)],
                   capture_output=True, text=True, timeout=120, check=True)
    first = json.loads((out / "index.jsonl").read_text().splitlines()[0])["file"]
    from orchard_cli.main import main

    student = tmp_path / "student"
    assert main(["train", "-t", str(out / first), "--model", "smollm2", "--out", str(student),
                 "--max-steps", "1", "--max-seq-len", "512", "--threads", "1", "--format", "json"]) == 0
    assert (student / "model.safetensors").is_file()
