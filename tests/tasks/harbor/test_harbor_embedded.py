"""SmolLM2 and orchard's bash agent on two harbor-mini tasks on the docker backend (a smoke run):
each episode is recorded with its model calls and scored by the task's own verifier. Whether the
tiny model solves anything is not the point; that every part is wired is."""

from __future__ import annotations

import pytest

from orchard_cli.rollout.agent import EpisodeOptions
from orchard_cli.rollout.distill_run import DistillConfig, plan_distill
from orchard_cli.trajectory import read_trajectories

TASKS = ["count-lines", "sort-numbers"]


@pytest.mark.model
@pytest.mark.docker
@pytest.mark.slow
def test_smollm2_and_the_bash_agent_run_two_harbor_tasks(smollm2, tmp_path):
    out = tmp_path / "harbor.jsonl"
    config = DistillConfig(suite="harbor-mini", instances=TASKS, teachers=["smollm2"], base_url="smollm2",
                           harness="bash", backend="docker", out=str(out),
                           options=EpisodeOptions(max_turns=2, max_calls=2, timeout_seconds=900),
                           proxy={"extra_body": {"max_tokens": 48}})
    summary = plan_distill(config).execute()
    assert summary.errors == 0, summary
    records = read_trajectories(out)
    assert sorted(r.task_id for r in records) == sorted(TASKS)
    for record in records:
        assert record.calls and all(c.status == 200 for c in record.calls)
        assert record.outcome.category in ("resolved", "unresolved"), record.outcome
        state = record.evidence.state
        assert state["reward_file"] == "reward.txt" and set(state["rewards"]) == {"reward"}  # the verifier ran
        assert "Count the lines" in record.calls[0].request["messages"][-1]["content"] or record.task_id != "count-lines"
