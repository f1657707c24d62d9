"""`orchard rollout` and `orchard rl` on the embedded SmolLM2, through the real rollout core (bwrap
sandboxes, the chat harness, the recording proxy, the quiz family's checker)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from orchard_cli.main import main

pytestmark = [pytest.mark.model, pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture(scope="module")
def rollouts(smollm2_home, tmp_path_factory):
    """4 capitals tasks x G=4 at temperature 1, replies cut at 8 tokens: JSONL and Parquet."""
    folder = tmp_path_factory.mktemp("rollouts")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHARD_HOME", str(smollm2_home))
        code = main(["rollout", "capitals", "--harness", "chat", "--limit", "4", "-G", "4", "--max-new-tokens", "8",
                     "--max-tokens", "100000", "--price", "smollm2=1,2", "--out", str(folder / "r.jsonl"), "--parquet", str(folder / "r.parquet"), "--format", "json"])
    assert code == 0
    return folder


def test_rollouts_hold_the_policys_own_tokens(rollouts, smollm2) -> None:
    import torch

    from orchard_cli.rl.rollouts import read_rollouts

    found = read_rollouts(rollouts / "r.jsonl")
    assert len(found) == 16 and {r.reward_kind for r in found} == {"resolved"}
    assert all(r.trainable and len(r.calls) == 1 and r.untracked_calls == 0 for r in found)
    assert {r.uid for r in found} == {r.task_id for r in found} and len({r.uid for r in found}) == 4
    for r in found:  # advantages are group-normalized: they sum to 0 within each group
        group = [x.advantage for x in found if x.uid == r.uid]
        assert sum(group) == pytest.approx(0.0, abs=1e-5)
    one = next(r for r in found if r.reward == 1.0) if any(r.reward for r in found) else found[0]
    call = one.calls[0]
    assert 1 <= len(call.completion_ids) <= 9  # 8 sampled tokens, and the end-of-turn token when it stopped
    # The ids are what the policy saw: the chat template of the task's question, as the server renders it.
    from orchard_cli.tasks.quiz import builtin_records

    question = next(r["question"] for r in builtin_records() if r["instance_id"] == one.task_id)
    assert smollm2.encode_chat([{"role": "user", "content": question}]) == call.prompt_ids
    # ... and what it produced: replaying the prompt and the completion through the model gives back
    # the log-probabilities the server returned for each sampled token.
    with torch.no_grad():
        logits = smollm2.model(input_ids=torch.tensor([call.prompt_ids + call.completion_ids])).logits[0].float()
    replay = torch.log_softmax(logits, -1)[len(call.prompt_ids) - 1:-1].gather(
        -1, torch.tensor(call.completion_ids).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(replay, torch.tensor(call.logprobs), atol=1e-3), (replay, call.logprobs)


def test_parquet_has_one_row_per_trainable_segment(rollouts) -> None:
    from orchard_cli.rl.columns import read_parquet
    from orchard_cli.rl.rollouts import read_rollouts

    rows = read_parquet(rollouts / "r.parquet")
    found = {r.episode_id: r for r in read_rollouts(rollouts / "r.jsonl")}
    assert len(rows) == 16
    for row in rows:
        r = found[row["episode_id"]]
        assert row["prompts"] == r.segments[0].prompt_ids and row["responses"] == r.segments[0].response_ids
        assert row["rollout_log_probs"] == pytest.approx(r.segments[0].rollout_log_probs, abs=1e-6)
        assert row["reward"] == r.reward and row["uid"] == r.uid


def test_rollout_records_the_run_limits_every_command_shares(rollouts) -> None:
    import json

    options = json.loads((rollouts / "r.run" / "config.json").read_text())["options"]
    assert options == {"timeout_seconds": 1800.0, "max_turns": 50, "max_calls": 100, "max_tokens": 100000,
                       "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}


def test_greedy_rollout_replays_exactly(smollm2_home, smollm2, tmp_path, monkeypatch, capsys) -> None:
    from orchard_cli.rl.rollouts import read_rollouts

    monkeypatch.setenv("ORCHARD_HOME", str(smollm2_home))
    assert main(["rollout", "capitals", "--harness", "chat", "--instances", "capital-italy", "-G", "2", "--temperature", "0",
                 "--max-new-tokens", "8", "--out", str(tmp_path / "g.jsonl")]) == 0
    first, second = read_rollouts(tmp_path / "g.jsonl")
    rewarded = sum(r.reward > 0 for r in (first, second))  # the progress counts them (it said "0 resolved")
    assert f"rollout [2/2] {rewarded} with reward, 0 errors" in capsys.readouterr().err
    call = first.calls[0]
    assert call.completion_ids == second.calls[0].completion_ids  # greedy: the same answer twice
    smollm2.forget()
    again = [s.token_id for s in smollm2.steps(call.prompt_ids, max_tokens=8)]
    produced = call.completion_ids[:len(again)]
    assert produced == again and smollm2.decode(again).strip() in smollm2.decode(call.completion_ids)
    assert first.advantage == second.advantage == 0.0  # equal rewards teach nothing


def test_rl_two_steps_then_resume_and_train_from_a_file(rollouts, smollm2_home, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ORCHARD_HOME", str(smollm2_home))
    out = tmp_path / "run"
    args = ["rl", "capitals", "--harness", "chat", "--limit", "4", "--steps", "2", "--tasks-per-step", "4", "-G", "4",
            "--max-new-tokens", "8", "--save-every", "1", "--out", str(out), "--format", "json"]
    batches = {t for t in threading.enumerate() if t.name.startswith("orchard-batch-")}
    assert main(args) == 0
    deadline = time.monotonic() + 60  # the served copy's batching thread ends with the run (not a model leaked per run)
    while {t for t in threading.enumerate() if t.name.startswith("orchard-batch-")} - batches and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not {t for t in threading.enumerate() if t.name.startswith("orchard-batch-")} - batches
    steps = [json.loads(line) for line in open(out / "steps.jsonl")]
    assert [s["step"] for s in steps] == [1, 2] and all(s["episodes"] == 16 for s in steps)
    # Step 2's rollouts were sampled by the served copy after the weight sync: its log-probabilities
    # are the learner's own (the gap is the difference over every trained token).
    assert steps[1]["logprob_gap"] is not None and steps[1]["logprob_gap"] < 1e-3
    assert (out / "model" / "config.json").is_file() and (out / "reward_curve.png").stat().st_size > 1000
    lines = [json.loads(line) for line in open(out / "rollouts.jsonl")]
    assert len(lines) == 32
    # Every call says which weights sampled it: the start's (version 0) in step 1, step 1's after the sync.
    assert {(r["step"], c["weight_version"]) for r in lines for c in r["calls"]} == {(1, "0"), (2, "1")}
    assert main(args) == 2  # the folder holds this run: --resume or another folder
    assert main(args + ["--resume"]) == 0  # finished: nothing to do, the folder stays whole
    assert len(open(out / "steps.jsonl").readlines()) == 2
    offline = tmp_path / "offline"
    assert main(["rl", "--rollouts", str(rollouts / "r.jsonl"), "--steps", "1", "--out", str(offline)]) == 0
    state = json.loads((offline / "orchard_rl.json").read_text())
    assert state["status"] == "finished" and (offline / "model" / "config.json").is_file()
    [step] = [json.loads(line) for line in open(offline / "steps.jsonl")]
    assert step["episodes"] == 16 and step["trained_tokens"] > 0


def test_positive_advantage_completions_become_likelier(smollm2_dir) -> None:
    """One update on a group where 'Paris' was rewarded and 'London' was not."""
    import torch

    from orchard_cli.models.local_model import load_weights
    from orchard_cli.rl.learner import Learner, LearnerConfig
    from orchard_cli.rl.samples import PolicyCall, Rollout, assign_advantages, segments_of

    model, tokenizer, _ = load_weights(str(smollm2_dir))
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    answers = {"Paris": 1.0, "London": 0.0}
    group = []
    for k, (text, reward) in enumerate(list(answers.items()) * 2):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [end]
        calls = [PolicyCall(prompt_ids=prompt_ids, completion_ids=ids, logprobs=[0.0] * len(ids))]
        group.append(Rollout(episode_id=f"e{k}", uid="g", suite="s", task_id="t", attempt=k + 1, policy="p",
                             harness="chat", category="resolved" if reward else "unresolved", resolved=bool(reward),
                             reward=reward, reward_kind="resolved", calls=calls, segments=segments_of(calls)))
    assign_advantages(group)
    learner = Learner(model, LearnerConfig(lr=1e-5), pad_id=tokenizer.pad_token_id or 0)
    from orchard_cli.rl.learner import items_of

    items = items_of(group[:2], 2048)[0]

    def mean_logp(item) -> float:
        return float(learner.logps([item.sample]).mean())

    before = [mean_logp(i) for i in items]
    stats = learner.update(group)
    after = [mean_logp(i) for i in items]
    assert stats.trained_tokens > 0 and stats.grad_norm > 0
    assert after[0] > before[0] and after[1] < before[1], (before, after)
    with torch.no_grad():
        assert all(torch.isfinite(p).all() for p in model.parameters())
