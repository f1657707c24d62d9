"""`orchard distill export --format trl` handed to TRL: `trl sft` (TRL 1.16, its own CLI, through
accelerate) trains one step on the export, and the tokens it trains on are exactly the tokens
orchard's own sample builder trains on: the exported ids and mask are orchard's samples, and TRL's
step-1 loss equals orchard's loss over those tokens (the model is a tiny Llama with large initial
weights, whose token losses spread widely: one token more or less moves the mean by more than the
tolerance, which the test also shows). docs/training.md's TRL launch line is this command with
only sizes and paths changed."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from orchard_cli.main import main
from orchard_cli.training.synthetic import synthetic_trajectory
from tiny_model import make_tiny_model
from train_helpers import write_trajectories

ROOT = Path(__file__).resolve().parents[2]
# `trl sft` + these flags (MODEL, DATA and OUT filled in) is the launch line docs/training.md shows.
TRL_ARGS = ["--model_name_or_path", "MODEL", "--dataset_name", "DATA", "--output_dir", "OUT",
            "--max_steps", "1", "--per_device_train_batch_size", "3", "--learning_rate", "1e-5",
            "--max_length", "1024", "--dtype", "float32", "--bf16", "false", "--gradient_checkpointing", "false",
            "--logging_steps", "1", "--save_strategy", "steps", "--save_steps", "1", "--report_to", "none"]
SIZES = {"--model_name_or_path", "--dataset_name", "--output_dir", "--max_steps", "--per_device_train_batch_size",
         "--max_length", "--logging_steps", "--save_steps"}


def flags(argv: list[str]) -> dict[str, str]:
    assert len(argv) % 2 == 0 and all(a.startswith("--") for a in argv[::2]), argv
    return dict(zip(argv[::2], argv[1::2]))


def orchard_loss(model_dir: Path, samples: list) -> float:
    """Mean cross-entropy over the samples' trained tokens, as orchard train computes it."""
    import torch
    from transformers import AutoModelForCausalLM

    from orchard_cli.training.batches import Row, collate, loss_sum

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        total = sum(float(loss_sum(model, collate([Row([s])], 0, "cpu"), True)) for s in samples)
    return total / sum(sum(1 for x in s.labels[1:] if x != -100) for s in samples)


@pytest.mark.model
@pytest.mark.slow
def test_trl_trains_on_exactly_orchards_tokens(smollm2_dir, tmp_path, capsys) -> None:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("trl", reason="pip install 'orchard-cli[train]' (trl)")
    from orchard_cli.training.turns import EpisodeFilter, load_episodes
    from orchard_cli.training.samples import build_samples

    model_dir = make_tiny_model(tmp_path / "peaked", smollm2_dir, init_std=0.5)
    rows = [synthetic_trajectory(s, calls=1) for s in (61, 62, 63)] + [synthetic_trajectory(64, calls=1, resolved=False)]
    data = write_trajectories(tmp_path / "traj.jsonl", rows)
    export = tmp_path / "trl-data"
    assert main(["distill", "export", str(data), "--format", "trl", "--model", str(model_dir),
                 "--out", str(export), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["format"] == "trl" and result["rows"] == 3 and result["skipped"] == 1  # resolved only, as train

    # the export holds orchard's samples: the same ids, and 1 exactly where orchard's labels train
    episodes, _ = load_episodes([data], EpisodeFilter())
    from transformers import AutoTokenizer

    samples, _ = build_samples(episodes, AutoTokenizer.from_pretrained(model_dir), builder="per-call")
    frame = pd.read_parquet(result["files"][0])
    assert [list(ids) for ids in frame["input_ids"]] == [s.input_ids for s in samples]
    assert [list(m) for m in frame["assistant_masks"]] == [[0] + [int(x != -100) for x in s.labels[1:]] for s in samples]
    assert frame["messages"][0][-1]["role"] == "assistant"

    # TRL trains one step on it, through its own CLI
    out = tmp_path / "trl-out"
    values = {"MODEL": str(model_dir), "DATA": str(export), "OUT": str(out)}
    cmd = [str(Path(sys.executable).parent / "trl"), "sft", *[values.get(a, a) for a in TRL_ARGS]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [log] = [e for e in json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())["log_history"]
             if "loss" in e]
    assert log["num_tokens"] == sum(len(s.input_ids) for s in samples)  # every token, none cut
    ours = orchard_loss(model_dir, samples)
    assert log["loss"] == pytest.approx(ours, rel=1e-4)
    # ... and the check tells masks apart: one trained token less moves orchard's loss past the tolerance
    fewer = [samples[0].__class__(samples[0].input_ids, samples[0].labels[:-1] + [-100], "x")] + samples[1:]
    assert log["loss"] != pytest.approx(orchard_loss(model_dir, fewer), rel=1e-4)


def test_docs_trl_launch_line_is_the_tests_command() -> None:
    text = (ROOT / "docs" / "training.md").read_text()
    marker = "<!-- trl-launch: tests/training/test_export_trl.py -->"
    assert marker in text
    block = text.split(marker, 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[:2] == ["trl", "sft"], argv
    docs, test = flags(argv[2:]), flags(TRL_ARGS)
    assert docs.keys() == test.keys()
    assert {k: v for k, v in docs.items() if k not in SIZES} == {k: v for k, v in test.items() if k not in SIZES}
