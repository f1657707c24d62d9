"""`orchard train` under torchrun (2 gloo processes on the CPU, fp32, a tiny model the test makes):
FSDP2 computes what one process computes.

- per-step losses of 20 steps equal the one-process run's within 1e-4 relative (with activation
  checkpointing on in the 2-process run: it changes memory, not the numbers);
- each process holds about half of the parameters + optimizer state of one process;
- a run started in 1 process, resumed in 2 (from the 1-process checkpoint), stopped, and finished in
  1 (from the 2-process sharded checkpoint) logs the same losses and ends with the same weights;
- the consolidated model (gathered from the shards into safetensors) gives the logits of the
  one-process run's unsharded save;
- LoRA: a sharded frozen base with trainable adapters, merged on rank 0, gives the base plus the
  adapter one process trains.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchard_cli.main import main
from orchard_cli.training.synthetic import synthetic_trajectory
from train_helpers import write_trajectories

pytestmark = [pytest.mark.model, pytest.mark.slow]
HERE = Path(__file__).parent
TIMEOUT = 600  # a 2-process run takes ~15 s here when quiet


@pytest.fixture(scope="module")
def tiny(tiny_dir) -> Path:
    return tiny_dir


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    return write_trajectories(folder / "traj.jsonl", [synthetic_trajectory(s, calls=2) for s in range(1, 9)])


def args(data: Path, tiny: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "-t", str(data), "--model", str(tiny), "--out", str(out), "--max-steps", "20",
            "--max-seq-len", "512", "--precision", "fp32", "--lr", "1e-3", "--batch-size", "2", "--grad-accum", "2",
            "--save-every", "5", "--threads", "1", "--format", "json", *extra]


def torchrun(argv: list[str], *, stop: int | None = None) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node 2` of orchard (or of stop_at.py: stopped at a step)."""
    target = [str(HERE / "stop_at.py"), str(stop)] if stop is not None else ["-m", "orchard_cli.main"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *target, *argv]
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env)


def losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "training_log.jsonl").read_text().splitlines()]


def logits(folder: Path) -> "object":
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.arange(100, 164).unsqueeze(0)
    with torch.no_grad():
        return model(ids).logits


@pytest.fixture(scope="module")
def runs(tiny, data, tmp_path_factory) -> dict[str, object]:
    """The one-process reference, the two-process run, and the 1 -> 2 -> 1 process resumed run."""
    from orchard_cli.training.trainer import Trainer

    root = tmp_path_factory.mktemp("runs")
    out: dict[str, object] = {}
    one = root / "one"
    assert main(args(data, tiny, one)) == 0
    out["one"] = json.loads((one / "orchard_train.json").read_text())["result"]
    two = root / "two"
    done = torchrun(args(data, tiny, two, "--grad-checkpointing"))
    assert done.returncode == 0, done.stderr[-3000:]
    out["two"] = json.loads(done.stdout)
    # 1 process to step 10, 2 processes to step 15, 1 process to the end
    resumed = root / "resumed"
    real = Trainer.run_step
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Trainer, "run_step", lambda self, i: (_ for _ in ()).throw(KeyboardInterrupt) if i >= 10
                   else real(self, i))
        assert main(args(data, tiny, resumed)) == 130
    assert [p.name for p in (resumed / "checkpoints").iterdir()] == ["step-000010"]
    done = torchrun(args(data, tiny, resumed, "--resume"), stop=15)
    assert done.returncode != 0 and "step-000015" in os.listdir(resumed / "checkpoints"), done.stderr[-3000:]
    assert len(list((resumed / "checkpoints" / "step-000015" / "state").glob("*.distcp"))) == 2  # one per process
    assert main(args(data, tiny, resumed, "--resume")) == 0
    out["resumed"] = json.loads((resumed / "orchard_train.json").read_text())["result"]
    out["folders"] = {"one": one, "two": two, "resumed": resumed}
    return out


def test_two_processes_log_the_one_process_losses(runs) -> None:
    one, two = (losses(runs["folders"][k]) for k in ("one", "two"))
    assert len(one) == len(two) == 20
    assert two == pytest.approx(one, rel=1e-4)
    assert one[-1] < one[0] - 0.5  # it learned
    assert (runs["one"]["processes"], runs["one"]["shard"]) == (1, "none")
    assert (runs["two"]["processes"], runs["two"]["shard"]) == (2, "full")


def test_each_process_holds_half_of_the_state(runs) -> None:
    ratio = runs["two"]["state_mib"] / runs["one"]["state_mib"]
    assert 0.45 <= ratio <= 0.55, ratio


def test_resume_across_process_counts_continues_the_same_run(runs) -> None:
    import torch

    one, resumed = (losses(runs["folders"][k]) for k in ("one", "resumed"))
    assert runs["resumed"]["resumed_from"] == 15
    assert resumed == pytest.approx(one, rel=1e-4)  # steps 11-15 in 2 processes from a 1-process checkpoint,
    assert len(resumed) == 20                        # 16-20 in 1 process from a 2-process sharded one
    a, b = logits(runs["folders"]["one"]), logits(runs["folders"]["resumed"])
    assert float((a - b).abs().max()) <= 1e-4 * float(a.abs().max())
    assert torch.isfinite(b).all()


def test_consolidated_model_gives_the_unsharded_logits(runs) -> None:
    from safetensors.torch import load_file

    folders = runs["folders"]
    assert load_file(str(folders["two"] / "model.safetensors")).keys() == \
        load_file(str(folders["one"] / "model.safetensors")).keys()  # a tied weight once, as save_pretrained
    a, b = logits(folders["one"]), logits(folders["two"])
    assert float((a - b).abs().max()) <= 1e-4 * float(a.abs().max())
    assert json.loads((folders["two"] / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]


def test_lora_on_a_sharded_base_trains_the_one_process_adapter(tiny, data, tmp_path) -> None:
    """1 process saves the adapter; 2 processes (sharded frozen base) merge theirs on rank 0: the
    merged weights are the base plus the one-process adapter's product."""
    from safetensors.torch import load_file

    lora = ["--lora", "--max-steps", "3"]
    assert main(args(data, tiny, tmp_path / "one", *lora)) == 0
    done = torchrun(args(data, tiny, tmp_path / "two", *lora, "--merge"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert losses(tmp_path / "two") == pytest.approx(losses(tmp_path / "one"), rel=1e-4)
    adapter = load_file(str(tmp_path / "one" / "adapter_model.safetensors"))
    base = load_file(str(tiny / "model.safetensors"))
    merged = load_file(str(tmp_path / "two" / "model.safetensors"))
    assert merged.keys() == base.keys() and not any("lora" in k for k in merged)
    scale = 2.0  # lora_alpha = 2 * r
    checked = 0
    for key, a in adapter.items():
        if ".lora_A." not in key:
            continue
        b = adapter[key.replace(".lora_A.", ".lora_B.")]
        target = key.split("base_model.model.", 1)[1].replace(".lora_A.weight", ".weight")
        expected = base[target] + scale * (b @ a)
        assert (merged[target] - expected).abs().max() <= 1e-5, target
        checked += bool(b.abs().max() > 0)  # B starts at 0: the adapter learned
    assert checked >= 7 * 2  # every linear layer of both blocks
