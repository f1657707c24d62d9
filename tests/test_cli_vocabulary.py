"""One CLI vocabulary (issue 31, item 6): every renamed flag works under its new name, and under its
old one with one note on stderr; the run limits reach the episodes of every command; an eval run
folder written before the rename resumes. Through the CLI, on real suites."""

from __future__ import annotations

import json
import socket

import pytest

from orchard_cli.main import main

NOTE = "note: "


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(NOTE)]


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_distill_takes_the_suite_as_its_argument_and_suite_still_works(capsys, tmp_path):
    runs = {}
    for name, spelling in (("new", ["calc"]), ("old", ["--suite", "calc"])):
        out = tmp_path / f"{name}.jsonl"
        code, _, err = _cli(capsys, "distill", *spelling, "--base-url", "gold", "--limit", "1",
                            "--out", str(out), "--format", "json")
        assert code == 0, err[-2000:]
        runs[name] = (json.loads((tmp_path / f"{name}.run" / "config.json").read_text()), _notes(err))
    assert runs["new"][0]["suite"] == runs["old"][0]["suite"] == "calc"
    assert runs["new"][1] == []
    assert runs["old"][1] == ["note: --suite is now the SUITE argument; the old spelling still works, "
                              "and a later release drops it"]
    assert runs["new"][0]["harness"] == "bash"  # the one default harness


def test_distill_model_and_its_alias_teacher_name_the_same_teachers(capsys, tmp_path):
    seen = []
    for flag in ("--model", "--teacher"):
        code, _, err = _cli(capsys, "distill", "calc", flag, "t1", "--base-url", "scripted", "--price", "nobody=1,2",
                            "--out", str(tmp_path / "t.jsonl"))
        assert code == 2 and _notes(err) == [], err
        seen.append([line for line in err.splitlines() if line.startswith("error:")])
    assert seen[0] == seen[1] == ["error: --price names a model that is not a teacher: nobody"]


@pytest.mark.parametrize("command", [["rollout", "calc", "--model", "m"],
                                     ["rl", "calc", "--model", "m", "--sync", "checkpoint"]])
def test_policy_url_is_now_base_url(command, capsys, tmp_path):
    url = _closed_url()
    errors = {}
    for flag in ("--base-url", "--policy-url"):
        code, _, err = _cli(capsys, *command, flag, url, "--harness", "chat", "--out", str(tmp_path / "o"))
        assert code == 2, err
        errors[flag] = err
    want = f"error: model endpoint --base-url {url}: connection refused"
    assert want in errors["--base-url"] and want in errors["--policy-url"]
    assert _notes(errors["--base-url"]) == []
    assert _notes(errors["--policy-url"]) == [
        "note: --policy-url is now --base-url; the old spelling still works, and a later release drops it"]


def test_both_spellings_at_once_are_refused(capsys, tmp_path):
    code, _, err = _cli(capsys, "rollout", "calc", "--base-url", "http://a/v1", "--policy-url", "http://b/v1",
                        "--out", str(tmp_path / "o"))
    assert code == 2 and "error: --policy-url is the old spelling of --base-url: give --base-url alone" in err


def test_eval_timeout_old_spelling_and_an_old_run_folder_resumes(capsys, tmp_path):
    base = ["eval", "calc", "--model", "gold", "--base-url", "gold", "--limit", "1", "--format", "json"]
    code, _, err = _cli(capsys, *base, "--agent-timeout", "77", "--out", str(tmp_path / "old"))
    assert code == 0, err[-2000:]
    assert _notes(err) == ["note: --agent-timeout is now --timeout; the old spelling still works, "
                           "and a later release drops it"]
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    assert config["timeout"] == 77 and config["harness"] == "bash"  # --model alone: the default harness
    # a run folder from before the rename: its config says agent_timeout; --resume reads it as --timeout
    config["agent_timeout"] = config.pop("timeout")
    for key in ("max_calls", "max_tokens", "prices", "api_key_env"):
        config.pop(key)
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    code, out, err = _cli(capsys, *base, "--timeout", "77", "--resume", "--out", str(tmp_path / "old"))
    assert code == 0 and _notes(err) == [] and json.loads(out)["total"] == 1, err[-2000:]
    code, _, err = _cli(capsys, *base, "--timeout", "78", "--resume", "--out", str(tmp_path / "old"))
    assert code == 2 and "timeout" in err  # a different limit is a different run


@pytest.mark.bwrap
def test_without_harness_a_run_takes_the_one_its_family_is_made_for(capsys, tmp_path):
    """--harness left out: the suite's family decides (quiz: chat, one call; web: orchard's web
    agent; else bash), and the config and the run's header say which."""
    for suite, want in (("capitals", "chat"), ("web-mini", "web"), ("calc", "bash")):
        run = tmp_path / suite
        code, _, err = _cli(capsys, "eval", suite, "--model", "gold", "--base-url", "gold", "--limit", "1",
                            "--out", str(run), "--format", "json")
        assert code == 0, err[-2000:]
        assert json.loads((run / "config.json").read_text())["harness"] == want
        assert _last_row(run)["resolved"], (suite, err[-2000:])


def _last_row(run) -> dict:
    return json.loads((run / "results.jsonl").read_text().splitlines()[-1])


def test_the_run_limits_reach_eval_as_they_reach_distill(capsys, tmp_path):
    """--max-calls caps the episode in the recording proxy, --price prices it: the demonstrator
    needs several calls for a claw task, and resolves it only when they are allowed."""
    base = ["eval", "claw-mini", "--model", "gold", "--base-url", "gold", "--limit", "1", "--format", "json"]
    code, _, err = _cli(capsys, *base, "--price", "gold=1000,2000", "--out", str(tmp_path / "free"))
    assert code == 0, err[-2000:]
    free = _last_row(tmp_path / "free")
    assert free["resolved"] and free["cost_usd"] == round((free["tokens_in"] * 1000 + free["tokens_out"] * 2000) / 1e6, 6)
    code, _, err = _cli(capsys, *base, "--max-calls", "1", "--max-tokens", "100000", "--out", str(tmp_path / "capped"))
    assert code == 0, err[-2000:]
    capped = _last_row(tmp_path / "capped")
    assert not capped["resolved"] and capped["tokens_in"] < free["tokens_in"]
    config = json.loads((tmp_path / "capped" / "config.json").read_text())
    assert (config["max_calls"], config["max_tokens"]) == (1, 100000)
    code, _, err = _cli(capsys, *base, "--price", "other=1,2", "--out", str(tmp_path / "e2"))
    assert code == 2 and "--price names a model the run does not use: other" in err


@pytest.mark.parametrize("command", [["rollout", "calc"], ["rl", "calc"]])
def test_rollout_and_rl_take_the_run_limits(command, capsys, tmp_path):
    code, _, err = _cli(capsys, *command, "--harness", "chat", "--price", "other=1,2", "--max-calls", "3",
                        "--out", str(tmp_path / "r"))
    assert code == 2 and "--price names a model the run does not use: other" in err


def test_train_model_and_recorded_by(capsys, tmp_path):
    from orchard_cli.records import JsonlWriter
    from orchard_cli.training.synthetic import synthetic_trajectory

    data = tmp_path / "t.jsonl"
    with JsonlWriter(data) as writer:
        writer.write(synthetic_trajectory(31, calls=2, teacher="teacher"))
    missing = str(tmp_path / "no-such-model")  # a folder that is not there: refused without a hub lookup
    errors = {}
    for name, spelling in (("new", ["--model", missing, "--recorded-by", "nobody"]),
                           ("old", ["--base-model", missing, "--teacher", "nobody"])):
        code, _, err = _cli(capsys, "train", "-t", str(data), *spelling, "--out", str(tmp_path / name))
        assert code == 2, err
        errors[name] = err
    assert "no episode to train on" in errors["new"] and "no episode to train on" in errors["old"]
    assert _notes(errors["new"]) == []
    assert [n.split(";")[0] for n in _notes(errors["old"])] == ["note: --base-model is now --model",
                                                                 "note: --teacher is now --recorded-by"]
    code, _, err = _cli(capsys, "train", "-t", str(data), "--model", missing, "--recorded-by", "teacher",
                        "--out", str(tmp_path / "o"))
    assert code == 2 and "no-such-model" in err  # the filter kept the episode: the model is what is missing


def _graded(path, n: int = 6):
    from orchard_cli.records import JsonlWriter
    from orchard_cli.training.synthetic import synthetic_trajectory

    with JsonlWriter(path) as writer:
        for seed in range(n):
            writer.write(synthetic_trajectory(seed, calls=2, resolved=bool(seed % 2)))
    return path


@pytest.mark.parametrize("command", [["distill", "export", "{data}", "--format", "trl", "--out", "{out}"],
                                     ["rerank", "train", "--trajectories", "{data}", "--out", "{out}"]])
def test_the_model_of_export_and_rerank_train_is_model(command, capsys, tmp_path):
    data = _graded(tmp_path / "t.jsonl")
    errors = {}
    for flag in ("--model", "--base-model"):
        argv = [a.replace("{data}", str(data)).replace("{out}", str(tmp_path / flag.strip("-"))) for a in command]
        code, _, err = _cli(capsys, *argv, flag, str(tmp_path / "no-such-model"))
        assert code == 2, err
        errors[flag] = err
    assert "no-such-model" in errors["--model"] and "no-such-model" in errors["--base-model"]
    assert _notes(errors["--model"]) == []
    assert [n.split(";")[0] for n in _notes(errors["--base-model"])] == ["note: --base-model is now --model"]


def test_resume_takes_another_key_variable(capsys, tmp_path, monkeypatch):
    """Where the key is read from decides no result: --resume may name another variable."""
    monkeypatch.setenv("KEY_A", "a")
    monkeypatch.setenv("KEY_B", "b")
    base = ["eval", "calc", "--model", "gold", "--base-url", "gold", "--limit", "2", "--format", "json",
            "--out", str(tmp_path / "run")]
    code, _, err = _cli(capsys, *base, "--api-key-env", "KEY_A")
    assert code == 0, err[-2000:]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["api_key_env"] == "KEY_A"
    code, out, err = _cli(capsys, *base, "--api-key-env", "KEY_B", "--resume")
    assert code == 0 and json.loads(out)["total"] == 2, err[-2000:]


@pytest.mark.parametrize("command,old,new", [
    (["serve", "--model", "{missing}"], "--max-tokens", "--max-new-tokens"),
    (["rerank", "train", "--trajectories", "{data}", "--out", "{out}", "--model", "{missing}"], "--max-tokens",
     "--max-input-tokens"),
])
def test_a_token_cap_has_one_name_per_meaning(command, old, new, capsys, tmp_path):
    """`--max-tokens` is an episode's whole budget; serve's reply cap is `--max-new-tokens`, as in
    rollout and rl, and what rerank's LM reads is `--max-input-tokens`; the old spellings note it."""
    data = _graded(tmp_path / "t.jsonl")
    errors = {}
    for flag in (new, old):
        argv = [a.replace("{data}", str(data)).replace("{out}", str(tmp_path / flag.strip("-")))
                .replace("{missing}", str(tmp_path / "no-such-model")) for a in command]
        code, _, err = _cli(capsys, *argv, flag, "100")
        assert code == 2 and "no-such-model" in err, err  # the run itself refuses the missing model
        errors[flag] = err
    assert _notes(errors[new]) == []
    assert [n.split(";")[0] for n in _notes(errors[old])] == [f"note: {old} is now {new}"]
    argv = [a.replace("{data}", str(data)).replace("{out}", str(tmp_path / "both"))
            .replace("{missing}", str(tmp_path / "no-such-model")) for a in command]
    code, _, err = _cli(capsys, *argv, old, "100", new, "100")
    assert code == 2 and f"{old} is the old spelling of {new}: give {new} alone" in err


def test_recipe_max_reply_tokens_is_max_new_tokens(capsys, tmp_path):
    code, _, err = _cli(capsys, "recipe", "claw", "--max-reply-tokens", "64", "--max-new-tokens", "64",
                        "--out", str(tmp_path / "r"))
    assert code == 2 and "--max-reply-tokens is the old spelling of --max-new-tokens" in err
    assert not (tmp_path / "r").exists()
