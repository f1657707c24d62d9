"""Trajectories -> samples on SmolLM2's real tokenizer and chat template (no training here)."""

from __future__ import annotations

import json

import pytest

from orchard_cli.proxy.calls import CallRecord
from orchard_cli.training.turns import EpisodeFilter, episode_of, load_episodes
from orchard_cli.training.samples import IGNORE, build_samples
from orchard_cli.training.synthetic import synthetic_trajectory
from train_helpers import chatml_roles, write_trajectories

pytestmark = pytest.mark.model


def _episodes(*trajectories):
    return [episode_of(t) for t in trajectories]


def test_loss_masking_only_assistant_tokens_carry_loss(tokenizer):
    episodes = _episodes(synthetic_trajectory(1, calls=4))
    merged, stats = build_samples(episodes, tokenizer, builder="merged")
    assert stats.samples == 1 and stats.merge_breaks == 0 and stats.turns == 4
    sample = merged[0]
    roles = chatml_roles(sample.input_ids, tokenizer)
    assert {"system", "user", "assistant", "header", "between"} <= set(roles)
    text = tokenizer.decode(sample.input_ids)
    assert "<tool_response>" in text and "<tool_call>" in text  # tool traffic is really in there
    for position, (role, label) in enumerate(zip(roles, sample.labels)):
        if role == "assistant":
            assert label == sample.input_ids[position], f"assistant token {position} carries no loss"
        else:
            assert label == IGNORE, f"{role} token {position} ({tokenizer.decode([sample.input_ids[position]])!r}) carries loss"
    # every assistant turn ends with its end-of-turn token, and that token is trained (the model learns to stop)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    trained_ends = [i for i, (t, l) in enumerate(zip(sample.input_ids, sample.labels)) if t == end and l != IGNORE]
    assert len(trained_ends) == 4


def test_per_call_samples_train_only_the_answer_of_their_call(tokenizer):
    episodes = _episodes(synthetic_trajectory(2, calls=3))
    samples, stats = build_samples(episodes, tokenizer, builder="per-call")
    assert stats.samples == 3
    for k, sample in enumerate(samples):
        roles = chatml_roles(sample.input_ids, tokenizer)
        starts = [i for i, r in enumerate(roles) if r == "assistant" and (i == 0 or roles[i - 1] != "assistant")]
        assert len(starts) == k + 1  # the history holds the k earlier answers
        last = starts[-1]
        for position, (role, label) in enumerate(zip(roles, sample.labels)):
            trained = role == "assistant" and position >= last
            assert (label != IGNORE) == trained, (k, position, role)


def test_merged_breaks_where_the_next_prompt_does_not_extend_the_last(tokenizer):
    trajectory = synthetic_trajectory(3, calls=4)
    # From its third call on, the harness sends a rewritten history (it summarised a tool output).
    for record in trajectory.calls[2:]:
        tool = next(m for m in record.request["messages"] if m["role"] == "tool")
        tool["content"] = "[output elided]"
    samples, stats = build_samples(_episodes(trajectory), tokenizer, builder="merged")
    assert stats.merge_breaks == 1 and stats.samples == 2
    per_call, _ = build_samples(_episodes(trajectory), tokenizer, builder="per-call")
    assert sum(s.trainable for s in samples) == sum(s.trainable for s in per_call)


def test_length_policy_counts_breaks_truncations_and_drops(tokenizer):
    episodes = _episodes(synthetic_trajectory(4, calls=4))
    full, _ = build_samples(episodes, tokenizer, builder="per-call", max_seq_len=4096)
    lengths = sorted(len(s.input_ids) for s in full)
    limit = lengths[1]  # the two shortest fit; the longer two do not
    samples, stats = build_samples(episodes, tokenizer, builder="per-call", max_seq_len=limit)
    assert all(len(s.input_ids) <= limit for s in samples)
    assert stats.truncated + stats.dropped_too_long == 2
    assert stats.samples == 4 - stats.dropped_too_long
    merged, mstats = build_samples(episodes, tokenizer, builder="merged", max_seq_len=limit)
    assert mstats.length_breaks >= 1 and all(len(s.input_ids) <= limit for s in merged)


def _with_ids(trajectory, tokenizer, ids_of_prompt):
    """The calls as `orchard serve` records them: prompt/completion token ids (no end token)."""
    from orchard_cli.training.samples import Encoder

    encoder = Encoder.for_tokenizer(tokenizer)
    calls = []
    for record in trajectory.calls:
        turn = episode_of(trajectory.model_copy(update={"calls": [record]})).turns[0]
        prompt = encoder.render(turn.prompt, turn.tools, None, True)
        answer = encoder.render(turn.prompt + [turn.answer], turn.tools, None, False)[len(prompt):]
        completion = encoder.encode(answer.rstrip().removesuffix("<|im_end|>"))
        calls.append(record.model_copy(update={"prompt_token_ids": ids_of_prompt(encoder, prompt),
                                               "completion_token_ids": completion}))
    return trajectory.model_copy(update={"calls": calls})


def test_recorded_token_ids_are_used_when_they_are_the_base_models(tokenizer):
    plain = synthetic_trajectory(5, calls=3)
    recorded = _with_ids(plain, tokenizer, lambda enc, prompt: enc.encode(prompt))
    rendered, _ = build_samples(_episodes(plain), tokenizer, builder="merged")
    used, stats = build_samples(_episodes(recorded), tokenizer, builder="merged")
    assert stats.token_ids_used == 3 and stats.token_ids_rejected == 0 and stats.end_of_turn_appended == 3
    assert [s.input_ids for s in used] == [s.input_ids for s in rendered]
    assert [s.labels for s in used] == [s.labels for s in rendered]
    # ids of another tokenizer (a teacher's) are not the base model's: the turn is rendered instead
    foreign = _with_ids(plain, tokenizer, lambda enc, prompt: [7] * len(enc.encode(prompt)))
    again, stats = build_samples(_episodes(foreign), tokenizer, builder="merged")
    assert stats.token_ids_used == 0 and stats.token_ids_rejected == 3
    assert [s.input_ids for s in again] == [s.input_ids for s in rendered]


def _as_responses(record: CallRecord) -> CallRecord:
    """The same call as a Codex-style Responses call (instructions + input items)."""
    messages = record.request["messages"]
    items = []
    for m in messages[1:]:
        if m["role"] == "user":
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": m["content"]}]})
        elif m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        else:
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": m["content"]}]})
            for c in m.get("tool_calls") or ():
                items.append({"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                              "arguments": c["function"]["arguments"]})
    fn = record.request["tools"][0]["function"]
    request = {"model": "teacher", "instructions": messages[0]["content"], "input": items,
               "tools": [{"type": "function", **fn}]}
    answer = record.response["choices"][0]["message"]
    output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer["content"]}]}]
    for c in answer.get("tool_calls") or ():
        output.append({"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]})
    return record.model_copy(update={"endpoint": "responses", "request": request,
                                     "response": {"object": "response", "status": "completed", "output": output}})


def test_responses_calls_give_the_same_samples_as_chat_calls(tokenizer):
    chat = synthetic_trajectory(6, calls=3)
    responses = chat.model_copy(update={"calls": [_as_responses(r) for r in chat.calls]})
    a, _ = build_samples(_episodes(chat), tokenizer, builder="per-call")
    b, stats = build_samples(_episodes(responses), tokenizer, builder="per-call")
    assert stats.samples == 3 and [s.input_ids for s in a] == [s.input_ids for s in b]
    assert [s.labels for s in a] == [s.labels for s in b]


def test_filters_and_duplicates_are_counted(tmp_path, tokenizer):
    rows = [synthetic_trajectory(10), synthetic_trajectory(11, resolved=False),
            synthetic_trajectory(12, suite="other"), synthetic_trajectory(13, harness="codex"),
            synthetic_trajectory(14, teacher="big")]
    dup = synthetic_trajectory(10).model_copy(update={"episode_id": "ep-copy", "attempt": 1})
    path = write_trajectories(tmp_path / "t.jsonl", rows + [dup])
    episodes, report = load_episodes([path], EpisodeFilter(suites=["synthetic"], harnesses=["bash"],
                                                           teachers=["teacher"]))
    assert report.episodes_read == 6 and report.episodes_used == 1
    assert report.filtered == {"duplicate": 1, "harness": 1, "not_resolved": 1, "suite": 1, "teacher": 1}
    everything, report = load_episodes([path], EpisodeFilter(only_resolved=False))
    assert report.episodes_used == 5 and report.filtered == {"duplicate": 1}
    assert json.loads(path.read_text().splitlines()[0])["schema_version"] == 2  # trajectory schema 2 (evidence)
