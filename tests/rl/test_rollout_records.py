"""Rollout records: merged segments and their masks, rewards, advantages, the verl Parquet layout."""

from __future__ import annotations

import pytest

from orchard_cli.outcome import Outcome
from orchard_cli.rl.samples import PolicyCall, Rollout, assign_advantages, reward_of, segments_of


def call(prompt: list[int], completion: list[int]) -> PolicyCall:
    return PolicyCall(prompt_ids=prompt, completion_ids=completion, logprobs=[-0.5] * len(completion),
                      finish_reason="stop")


def test_a_multi_turn_episode_is_one_segment_with_environment_tokens_masked() -> None:
    first = call([1, 2, 3], [10, 11])
    second = call([1, 2, 3, 10, 11, 7, 8], [12])  # the tool result (7, 8) came back in between
    [seg] = segments_of([first, second])
    assert seg.prompt_ids == [1, 2, 3]
    assert seg.response_ids == [10, 11, 7, 8, 12]
    assert seg.response_mask == [1, 1, 0, 0, 1]
    assert seg.rollout_log_probs == [-0.5, -0.5, 0.0, 0.0, -0.5]


def test_a_rewritten_history_starts_a_new_segment() -> None:
    segments = segments_of([call([1, 2, 3], [10, 11]), call([1, 2, 9, 10], [12])])
    assert [s.prompt_ids for s in segments] == [[1, 2, 3], [1, 2, 9, 10]]
    assert [s.response_mask for s in segments] == [[1, 1], [1]]


def rollout(reward: float, category: str = "resolved", trainable: bool = True) -> Rollout:
    return Rollout(episode_id=f"e{reward}{category}", uid="t", suite="s", task_id="t", attempt=1, policy="p",
                   harness="chat", category=category, resolved=reward == 1, reward=reward, reward_kind="resolved",
                   trainable=trainable)


def test_errors_take_no_part_in_the_group() -> None:
    group = [rollout(1.0), rollout(0.0, "unresolved"), rollout(0.0, "infra_error", trainable=False), rollout(1.0)]
    assign_advantages(group)
    assert group[2].advantage == 0.0
    kept = [group[0].advantage, group[1].advantage, group[3].advantage]
    assert kept[0] == pytest.approx(kept[2]) and kept[0] > 0 > kept[1]
    assert sum(kept) == pytest.approx(0.0, abs=1e-6)


def test_reward_is_the_share_of_checks_where_a_family_reports_them() -> None:
    checks = Outcome(resolved=False, category="unresolved", tests={"checks": {"a": True, "b": False, "c": True, "d": True}})
    assert reward_of(checks) == (0.75, "checks")
    unsafe = Outcome(resolved=False, category="unsafe", tests={"checks": {"a": True, "b": False}})
    assert reward_of(unsafe) == (0.0, "checks")
    assert reward_of(Outcome(resolved=True, category="resolved", reward=1.0)) == (1.0, "resolved")


def test_parquet_columns_are_verls_batch_fields(tmp_path) -> None:
    pytest.importorskip("pyarrow")
    from orchard_cli.rl.columns import COLUMNS, read_parquet, write_parquet

    good = rollout(1.0)
    good.segments = segments_of([call([1, 2, 3], [10, 11]), call([1, 2, 3, 10, 11, 7], [12])])
    good.advantage = 0.5
    failed = rollout(0.0, "infra_error", trainable=False)
    failed.segments = segments_of([call([1], [2])])
    path = tmp_path / "r.parquet"
    assert write_parquet([good, failed], path) == 1
    [row] = read_parquet(path)
    assert tuple(row) == COLUMNS
    for name in ("prompts", "responses", "response_mask", "rollout_log_probs", "advantages", "token_level_scores",
                 "uid"):
        assert name in row  # the names verl's trainer reads (verl/trainer/ppo/ray_trainer.py, core_algos.py)
    assert row["responses"] == [10, 11, 7, 12] and row["response_mask"] == [1, 1, 0, 1]
    assert row["advantages"] == [0.5, 0.5, 0.0, 0.5]
    assert row["token_level_scores"] == [0.0, 0.0, 0.0, 1.0]
    assert not list(tmp_path.glob(".*partial*"))


def test_timeouts_and_untracked_calls_are_not_trained_on() -> None:
    from types import SimpleNamespace

    from orchard_cli.proxy.calls import CallRecord, CallTiming
    from orchard_cli.rl.samples import rollout_of

    def record(seq: int, ids: list[int] | None) -> CallRecord:
        return CallRecord(id=f"c{seq}", episode="e", seq=seq, endpoint="chat", status=200, request={},
                          response={"choices": [{"finish_reason": "stop"}]}, prompt_token_ids=[1, 2] if ids else None,
                          completion_token_ids=ids, logprobs=[-0.1] * len(ids or []),
                          timing=CallTiming(started_at=0.0, ended_ms=1.0))

    def result(category: str, records: list[CallRecord]):  # the parts of an EpisodeResult a rollout reads
        return SimpleNamespace(outcome=Outcome(resolved=False, category=category), episode_id="e", attempt=1,
                               task=SimpleNamespace(suite="s", task_id="t"), solver=SimpleNamespace(harness="chat"),
                               solution=SimpleNamespace(agent=SimpleNamespace(records=records)), duration_seconds=1.0)

    assert rollout_of(result("unresolved", [record(0, [5, 6])]), uid="t", policy="p").trainable
    assert not rollout_of(result("timeout", [record(0, [5, 6])]), uid="t", policy="p").trainable
    mixed = rollout_of(result("unresolved", [record(0, [5, 6]), record(1, None)]), uid="t", policy="p")
    assert mixed.untracked_calls == 1 and not mixed.trainable


def test_a_schema_1_rollout_still_reads(tmp_path) -> None:
    """Rollouts written before `weight_version` (schema 1) read as they are."""
    import json

    from orchard_cli.rl.rollouts import read_rollouts

    rollout = Rollout(episode_id="e", uid="t", suite="s", task_id="t", attempt=1, policy="p", harness="chat",
                      category="resolved", resolved=True, reward=1.0, reward_kind="resolved", calls=[call([1], [2])])
    row = rollout.model_dump(mode="json")
    assert row["schema_version"] == 2 and row["calls"][0]["weight_version"] is None
    row["schema_version"] = 1
    del row["calls"][0]["weight_version"]
    (tmp_path / "old.jsonl").write_text(json.dumps(row) + "\n")
    [read] = read_rollouts(tmp_path / "old.jsonl")
    assert read.schema_version == 1 and read.calls[0].weight_version is None
