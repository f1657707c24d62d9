"""Real harnesses on a web-mini task: OpenClaw and Codex drive the browser through the action
tools over MCP and the recording proxy, scripted by a teacher that makes the task's gold steps
(it passes) or its near miss (it fails). The model sees every browser action with its schema,
and each page comes back to it as text."""

from __future__ import annotations

import json

from orchard_cli.rollout.choose import reference
from orchard_cli.family import RunOptions
import pytest

from orchard_cli.env import connect
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.tasks.registry import load_suite
from orchard_cli.tasks.kit.browser_actions import NAMES

PREFIX = {"openclaw": "task__", "codex": "mcp__task__", "zeroclaw": "task__"}


def _teacher(calls, prefix: str) -> list[dict]:
    turns = [{"tool_calls": [{"name": prefix + c.tool, "arguments": c.arguments}]} for c in calls]
    return [*turns, {"content": "Done."}]


def _run(family, task, harness: str, steps) -> tuple:
    endpoint = ScriptedEndpoint(_teacher(steps.tool_calls, PREFIX[harness]), dialects=("chat",))
    info = endpoint.start()
    solver = AgentSolver(harness, model="teacher", base_url=info.base_url,
                         options=EpisodeOptions(timeout_seconds=240, max_calls=len(steps.tool_calls) + 4),
                         proxy_options={"upstream_dialects": ["chat"]})
    env = connect("local")
    try:
        result = run_episode(Episode(task=task, attempt=1, solver=solver, episode_id=f"{harness}-{task.task_id}"),
                             family=family, env=env, options=RunOptions())
    finally:
        solver.close()
        endpoint.stop()
        env.close()
    return result, result.solution.agent.records


def _shown(request: dict, prefix: str) -> set[str]:
    names = set()
    for tool in request.get("tools") or ():
        if tool.get("type") == "namespace":
            names |= {f"{tool['name']}__{inner['name']}" for inner in tool.get("tools") or ()}
        elif tool.get("type") == "function":
            names.add((tool.get("function") or tool)["name"])
    return {n[len(prefix):] for n in names if n.startswith(prefix)}


@pytest.mark.harness
@pytest.mark.bwrap
@pytest.mark.chromium
@pytest.mark.parametrize("harness", ["openclaw", "codex", pytest.param("zeroclaw", marks=pytest.mark.zeroclaw)])
def test_a_real_harness_completes_a_web_task_with_the_gold_steps_and_fails_the_near_miss(harness,
                                                                                       installed_harnesses):
    family, tasks = load_suite("web-mini")
    task = next(t for t in tasks if family.parsed(t).site == "shop" and any(
        c.kind == "request" for c in family.parsed(t).checks))
    try:
        gold = reference(family, task, None, "gold")
        result, records = _run(family, task, harness, gold)
        assert result.outcome.category == "resolved", (result.outcome, result.solution.agent.run)
        assert [(d.tool, d.status) for d in result.evidence.dispatches] == [(c.tool, 200) for c in gold.tool_calls]
        assert _shown(records[0].request, PREFIX[harness]) == set(NAMES)
        page = result.evidence.dispatches[0].result
        assert isinstance(page, str) and page.startswith("URL: ")
        later = json.dumps([r.request for r in records[1:]])  # chat messages or Responses input items
        assert "Accessibility tree" in later, "the page reaches the model"
        assert '\\"URL: ' not in later, "as text, not as a JSON-quoted string"

        miss = reference(family, task, None, "near_miss")
        result, _ = _run(family, task, harness, miss)
        assert result.outcome.category == "unresolved", (result.outcome, result.solution.agent.run)
        assert [d.tool for d in result.evidence.dispatches] == [c.tool for c in miss.tool_calls]
    finally:
        family.close()
