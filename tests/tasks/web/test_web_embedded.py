"""SmolLM2 and orchard's web agent on two web-mini tasks (a smoke run, two turns each): each
episode is recorded with its model calls, the page the model was shown and the browser actions
it dispatched, and gets a graded verdict. The model is tiny; that it is wired end to end is the
point, not what it solves."""

from __future__ import annotations

import pytest

from orchard_cli.rollout.agent import EpisodeOptions
from orchard_cli.rollout.distill_run import DistillConfig, plan_distill
from orchard_cli.tasks.registry import load_suite
from orchard_cli.trajectory import read_trajectories


@pytest.mark.model
@pytest.mark.bwrap
@pytest.mark.chromium
@pytest.mark.slow
def test_smollm2_and_the_web_agent_run_two_web_tasks(smollm2, tmp_path):
    family, tasks = load_suite("web-mini")
    chosen = [next(t for t in tasks if family.parsed(t).site == site).task_id for site in ("shop", "wiki")]
    out = tmp_path / "web.jsonl"
    config = DistillConfig(suite="web-mini", instances=chosen, teachers=["smollm2"], base_url="smollm2",
                           harness="web", out=str(out),
                           options=EpisodeOptions(max_turns=2, max_calls=2, timeout_seconds=900),
                           proxy={"extra_body": {"max_tokens": 48}})
    summary = plan_distill(config).execute()
    assert summary.errors == 0, summary
    records = read_trajectories(out)
    assert sorted(r.task_id for r in records) == sorted(chosen)
    for record in records:
        assert len(record.calls) == 2 and all(c.status == 200 for c in record.calls)
        assert record.outcome.category in ("resolved", "unresolved"), record.outcome
        assert record.outcome.details["total"] >= 1  # the checks ran
        shown = record.calls[0].request["messages"][1]["content"]
        assert "# The page now" in shown and "Accessibility tree" in shown and "[ref=e" in shown
        evidence = record.evidence
        assert evidence.dispatches and evidence.dispatches[0].tool == "observe"
        assert "requests" in evidence.state and evidence.state["url"].startswith("http://127.0.0.1:")
