"""SmolLM2 and orchard's bash agent on three claw-mini tasks (a smoke run): `distill` records each
episode with its model calls, its dispatches and its evidence, and each gets a graded verdict.
The model is tiny; whether it solves anything is not the point, that every part is wired is."""

from __future__ import annotations

import pytest

from orchard_cli.rollout.agent import EpisodeOptions
from orchard_cli.rollout.distill_run import DistillConfig, plan_distill
from orchard_cli.trajectory import read_trajectories

TASKS = ["mail-triage-1007", "mail-search-1006", "todo-from-mail-1010"]


@pytest.mark.model
@pytest.mark.bwrap
@pytest.mark.slow
def test_smollm2_and_the_bash_agent_run_three_claw_tasks(smollm2, tmp_path):
    out = tmp_path / "claw.jsonl"
    config = DistillConfig(suite="claw-mini", instances=TASKS, teachers=["smollm2"], base_url="smollm2",
                           harness="bash", out=str(out),
                           options=EpisodeOptions(max_turns=2, max_calls=2, timeout_seconds=900),
                           proxy={"extra_body": {"max_tokens": 48}})
    summary = plan_distill(config).execute()
    assert summary.errors == 0, summary
    records = read_trajectories(out)
    assert sorted(r.task_id for r in records) == sorted(TASKS)
    for record in records:
        assert record.calls and all(c.status == 200 for c in record.calls)
        assert record.outcome.category in ("resolved", "unresolved", "unsafe"), record.outcome
        assert record.outcome.details["total"] >= 3  # every check ran
        system = record.calls[0].request["messages"][0]["content"]
        assert "task_tool.py" in system and "## Task tools" in system
        evidence = record.evidence
        assert evidence is not None and evidence.state["mail"]["address"].endswith("@orchard.test")
        # what the agent did with the tools, recorded in order (the example call in its prompt
        # makes even this model call one now and then; each is a dispatch with its status)
        assert [d.seq for d in evidence.dispatches] == list(range(len(evidence.dispatches)))
