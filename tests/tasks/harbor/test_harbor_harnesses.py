"""Real harnesses on a harbor-mini task, on the docker backend: Codex and OpenClaw each run it
through the recording proxy, driven by a scripted teacher whose one shell command either solves
the task (the task's own verifier resolves it) or is a plausible wrong one (it does not)."""

from __future__ import annotations

import pytest

from orchard_cli.env import connect
from orchard_cli.family import RunOptions
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.tasks.registry import load_suite

pytestmark = [pytest.mark.docker, pytest.mark.harness]

RIGHT = "wc -l < /app/data.txt | tr -d ' ' > /app/count.txt"
WRONG = "echo 36 > /app/count.txt"
SHELL = {"codex": ("exec_command", "cmd"), "openclaw": ("exec", "command")}


def _run(harness: str, command: str):
    family, tasks = load_suite("harbor-mini", instances=["count-lines"])
    tool, arg = SHELL[harness]
    endpoint = ScriptedEndpoint([{"tool_calls": [{"name": tool, "arguments": {arg: command}}]}, {"content": "Done."}],
                                dialects=("chat",))
    info = endpoint.start()
    solver = AgentSolver(harness, model="teacher", base_url=info.base_url,
                         options=EpisodeOptions(timeout_seconds=240, max_calls=6),
                         proxy_options={"upstream_dialects": ["chat"]})
    env = connect("docker")
    try:
        return run_episode(Episode(task=tasks[0], attempt=1, solver=solver, episode_id=f"{harness}-{len(command)}"),
                           family=family, env=env, options=RunOptions(backend="docker"))
    finally:
        solver.close()
        endpoint.stop()
        env.close()


@pytest.mark.parametrize("harness", ["codex", "openclaw"])
def test_a_real_harness_resolves_with_the_right_command_and_not_with_a_wrong_one(harness, installed_harnesses):
    good = _run(harness, RIGHT)
    assert good.outcome.category == "resolved", (good.outcome, good.solution.agent.run)
    assert good.evidence.state["rewards"] == {"reward": 1.0}
    records = good.solution.agent.records
    assert records and "Count the lines" in str(records[0].request)
    bad = _run(harness, WRONG)
    assert bad.outcome.category == "unresolved" and bad.evidence.state["rewards"] == {"reward": 0.0}, bad.outcome
