"""`orchard train` through the CLI: end to end on SmolLM2, resume, LoRA, and every refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchard_cli.main import main
from orchard_cli.training.synthetic import synthetic_trajectory
from train_helpers import write_trajectories

SHORT = ["--max-seq-len", "512", "--threads", "1"]


def _data(tmp_path: Path, seeds=(31, 32, 33)) -> Path:
    rows = [synthetic_trajectory(s, calls=2) for s in seeds]
    rows.append(synthetic_trajectory(99, calls=2, resolved=False))
    return write_trajectories(tmp_path / "traj.jsonl", rows)


def _suite(tmp_path: Path, ids: list[str]) -> Path:
    path = tmp_path / "held-out.jsonl"
    path.write_text("".join(json.dumps({"instance_id": i, "repo": "acme/x", "base_commit": "0" * 40, "patch": "", "test_patch": "",
                                        "problem_statement": "x", "version": "1.0"}) + "\n" for i in ids))
    return path


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


@pytest.mark.model
def test_train_end_to_end_smollm2(tmp_path, capsys, smollm2_cached):
    data = _data(tmp_path)
    overlap = synthetic_trajectory(31, calls=2).task_id
    suite = _suite(tmp_path, [overlap, "acme__other-1"])
    out = tmp_path / "student"
    args = ["train", "-t", str(data), "--model", "smollm2", "--out", str(out), "--max-steps", "3",
            "--eval-suite", str(suite), "--allow-overlap", "--format", "json", *SHORT]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "CONTAMINATION" in captured.err and overlap in captured.err
    summary = json.loads(captured.out)
    assert summary["status"] == "finished" and summary["steps"] == 3 and summary["overlap"] == [overlap]
    assert summary["data"]["episodes_used"] == 3 and summary["data"]["filtered"] == {"not_resolved": 1}
    assert summary["samples"]["samples"] == 6 and summary["samples"]["format"] == "orchard-toolcall"
    assert summary["precision"] in ("bf16", "fp32") and summary["tokens_per_s"] > 0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md",
                 "loss.png", "training_log.jsonl", "orchard_train.json"):
        assert (out / name).is_file(), name
    assert not (out / "checkpoints").exists()
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3] and all(r["trainable_tokens"] > 0 for r in log)
    card = (out / "README.md").read_text()
    assert "SmolLM2" in card and overlap in card and "only resolved: True" in card
    assert json.loads((out / "orchard_train.json").read_text())["status"] == "finished"

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert tokenizer.chat_template  # the chat template travels with the checkpoint
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "List the files."}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    generated = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]

    # the same command again: refused without --resume, nothing to do with it
    assert main(args) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(args + ["--resume"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "already_finished"


@pytest.mark.model
def test_lora_resume_gives_the_uninterrupted_result(tmp_path, capsys, smollm2_dir, monkeypatch):
    from safetensors.torch import load_file

    from orchard_cli.training.trainer import Trainer

    data = _data(tmp_path, seeds=(41, 42))
    common = ["train", "-t", str(data), "--model", str(smollm2_dir), "--max-steps", "3", "--lora",
              "--merge", "--save-every", "1", "--precision", "fp32", "--lr", "1e-3", *SHORT]
    assert main([*common, "--out", str(tmp_path / "straight")]) == 0

    real = Trainer.run_step

    def interrupted(self, index):
        if index == 2:
            raise KeyboardInterrupt
        return real(self, index)

    monkeypatch.setattr(Trainer, "run_step", interrupted)
    out = tmp_path / "resumed"
    assert main([*common, "--out", str(out)]) == 130
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-000002"]
    assert json.loads((out / "orchard_train.json").read_text())["step"] == 2
    monkeypatch.setattr(Trainer, "run_step", real)
    capsys.readouterr()
    assert main([*common, "--out", str(out), "--resume", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["resumed_from"] == 2

    straight, resumed = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("straight", "resumed"))
    assert straight.keys() == resumed.keys() and not any("lora" in k for k in straight)
    for key in straight:
        assert (straight[key] - resumed[key]).abs().max() <= 1e-6, key
    base = load_file(str(smollm2_dir / "model.safetensors"))
    assert any((base[k] - straight[k]).abs().max() > 0 for k in base)  # the merged adapter changed weights
    losses = [[json.loads(l)["loss"] for l in (tmp_path / d / "training_log.jsonl").read_text().splitlines()]
              for d in ("straight", "resumed")]
    assert losses[0] == pytest.approx(losses[1], abs=1e-6) and len(losses[0]) == 3


@pytest.mark.model
def test_lora_without_merge_writes_an_adapter(tmp_path, smollm2_dir):
    data = _data(tmp_path, seeds=(51,))
    out = tmp_path / "adapter"
    assert main(["train", "-t", str(data), "--model", str(smollm2_dir), "--out", str(out),
                 "--max-steps", "1", "--lora", *SHORT]) == 0
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert not (out / "model.safetensors").exists()
    assert "LoRA adapter" in (out / "README.md").read_text()


def test_contaminated_data_is_refused(tmp_path, capsys):
    data = _data(tmp_path)
    suite = _suite(tmp_path, [synthetic_trajectory(32, calls=2).task_id])
    code = main(["train", "-t", str(data), "--model", "smollm2", "--out", str(tmp_path / "o"),
                 "--eval-suite", str(suite)])
    err = capsys.readouterr().err
    assert code == 2 and len(_error_lines(err)) == 1
    assert "also in the eval suite" in err and "--allow-overlap" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("content, message", [
    ("", "holds no trajectories"),
    ('{"schema_version": 1, "episode": "e", "seq": 0}\n', "is not a trajectory"),
    ("not json\n", "is not a JSON record"),
])
def test_bad_trajectory_files(tmp_path, capsys, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    assert main(["train", "-t", str(path), "--model", "smollm2", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert len(_error_lines(err)) == 1 and message in err


def test_refusals_before_any_model_loads(tmp_path, capsys):
    data = _data(tmp_path)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    cases = [
        (["--model", "smollm2", "--out", str(taken)], "is not a checkpoint of this run"),
        (["--model", "smollm2", "--out", str(tmp_path / "o"), "--merge"], "--merge needs --lora"),
        (["--model", "smollm2", "--out", str(tmp_path / "o"), "--suite", "nope"], "no episode to train on"),
        (["--model", "smollm2", "--out", str(tmp_path / "o"), "-t", str(tmp_path / "missing.jsonl")],
         "does not exist"),
    ]
    for extra, message in cases:
        assert main(["train", "-t", str(data), *extra]) == 2, message
        err = capsys.readouterr().err
        assert len(_error_lines(err)) == 1 and message in err, err
    assert (taken / "notes.txt").read_text() == "mine"


@pytest.mark.model
def test_a_base_model_that_cannot_be_found(tmp_path, capsys, smollm2_home, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no hub here: fail at once
    data = _data(tmp_path)
    for spec in (str(tmp_path / "no-such-model"), "acme/no-such-model"):
        code = main(["train", "-t", str(data), "--model", spec, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and len(_error_lines(err)) == 1 and "no-such-model" in err, err


def test_a_hub_id_without_a_hub_fails_at_once(tmp_path, capsys, monkeypatch):
    """No hub answering: one probe and a one-line error, not the hub library's ~50 s of retries."""
    import socket

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    out = tmp_path / "o"
    code = main(["train", "-t", str(_data(tmp_path)), "--model", "acme/no-such-model", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(_error_lines(err)) == 1, err
    assert f"'acme/no-such-model' is not 'smollm2' nor a folder, and there is no hub at http://127.0.0.1:{port}" in err
    assert not out.exists()
