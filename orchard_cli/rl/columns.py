"""Rollouts as Parquet, one row per segment, with the column names of verl's batch fields.

    uid                 string        the group (verl: non_tensor_batch["uid"]); GRPO normalizes within it
    data_source         string        the suite
    episode_id, task_id string
    segment             int32         index of the segment within its episode (0 for one-call episodes)
    prompts             list<int32>   prompt token ids (verl left-pads them into batch["prompts"])
    responses           list<int32>   response token ids (verl right-pads them into batch["responses"])
    response_mask       list<int8>    1: a policy token (trained), 0: a token the environment added
    rollout_log_probs   list<float32> the policy's log-probability per response token (0 where the mask is 0)
    token_level_scores  list<float32> the episode's reward on the segment's last policy token, 0 elsewhere
    advantages          list<float32> the episode's group-normalized advantage on every policy token
    reward              float32       the episode's reward (`reward_kind` says what it is)
    reward_kind         string        resolved | checks

Lists are unpadded; verl's `input_ids` are prompts + responses, `attention_mask` 1 over both, and
`position_ids` 0..n-1 (a loader pads them to the batch's widths). Only trainable rollouts (no
env/infra error) are written. The file is written whole to a temporary name and renamed: a crash
never leaves a partial file under the final name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from orchard_cli.errors import MissingDependencyError
from orchard_cli.rl.samples import Rollout

COLUMNS = ("uid", "data_source", "episode_id", "task_id", "segment", "prompts", "responses", "response_mask",
           "rollout_log_probs", "token_level_scores", "advantages", "reward", "reward_kind")


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError as exc:
        raise MissingDependencyError("writing Parquet needs pyarrow, which is not installed",
                                     hint="pip install 'orchard-cli[swe]' (pyarrow is pinned there)") from exc
    return pa, pq


def schema(pa: Any) -> Any:
    ints, floats = pa.list_(pa.int32()), pa.list_(pa.float32())
    return pa.schema([("uid", pa.string()), ("data_source", pa.string()), ("episode_id", pa.string()),
                      ("task_id", pa.string()), ("segment", pa.int32()), ("prompts", ints), ("responses", ints),
                      ("response_mask", pa.list_(pa.int8())), ("rollout_log_probs", floats),
                      ("token_level_scores", floats), ("advantages", floats), ("reward", pa.float32()),
                      ("reward_kind", pa.string())])


def rows(rollouts: Iterable[Rollout]) -> dict[str, list[Any]]:
    table: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    for rollout in rollouts:
        if not rollout.trainable:
            continue
        for index, seg in enumerate(rollout.segments):
            policy = [i for i, m in enumerate(seg.response_mask) if m]
            scores = [0.0] * len(seg.response_ids)
            if policy:
                scores[policy[-1]] = rollout.reward
            values = {"uid": rollout.uid, "data_source": rollout.suite, "episode_id": rollout.episode_id,
                      "task_id": rollout.task_id, "segment": index, "prompts": seg.prompt_ids,
                      "responses": seg.response_ids, "response_mask": seg.response_mask,
                      "rollout_log_probs": seg.rollout_log_probs, "token_level_scores": scores,
                      "advantages": [rollout.advantage * m for m in seg.response_mask],
                      "reward": rollout.reward, "reward_kind": rollout.reward_kind}
            for column in COLUMNS:
                table[column].append(values[column])
    return table


def write_parquet(rollouts: Iterable[Rollout], path: str | Path) -> int:
    """Write the rollouts' segments; returns the number of rows."""
    pa, pq = _pyarrow()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pydict(rows(rollouts), schema=schema(pa))
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        pq.write_table(table, partial)
        with open(partial, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return table.num_rows


def read_parquet(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a rollouts Parquet file, as dicts."""
    _, pq = _pyarrow()
    return pq.read_table(path).to_pylist()
