"""Real harnesses on claw-mini: OpenClaw and Codex each run two tasks through the recording proxy
and MCP, driven by a scripted teacher that makes a task's tool calls. The gold calls pass; a near
miss (a wrong call) fails. The recorded model request shows every task tool with its schema
(a harness hiding schemas behind a tool search would fail here)."""

from __future__ import annotations

from orchard_cli.rollout.choose import reference
from orchard_cli.family import RunOptions
import pytest

from orchard_cli.env import connect
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.tasks.registry import load_suite

PREFIX = {"openclaw": "task__", "codex": "mcp__task__", "zeroclaw": "task__"}


def _teacher(calls, answer: str, prefix: str) -> list[dict]:
    """One tool call per turn, then the final answer."""
    turns = [{"tool_calls": [{"name": prefix + c.tool, "arguments": c.arguments}]} for c in calls]
    return [*turns, {"content": answer}]


def _tools_shown(request: dict, prefix: str) -> dict[str, dict]:
    """name -> schema of the task tools in a recorded request (chat tools, or Codex's namespace)."""
    shown = {}
    for tool in request.get("tools") or ():
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or ():
                shown[f"{tool['name']}__{inner['name']}"] = inner.get("parameters")
        elif tool.get("type") == "function":
            fn = tool.get("function") or tool
            shown[fn["name"]] = fn.get("parameters")
    return {name[len(prefix):]: schema for name, schema in shown.items() if name.startswith(prefix)}


def _strip_defaults(schema):
    """A schema without `default` keys (OpenClaw drops them on the way to the model)."""
    if isinstance(schema, dict):
        return {k: _strip_defaults(v) for k, v in schema.items() if k != "default"}
    if isinstance(schema, list):
        return [_strip_defaults(v) for v in schema]
    return schema


def _run(family, task, harness: str, gold) -> tuple:
    endpoint = ScriptedEndpoint(_teacher(gold.tool_calls, gold.answer or "Done.", PREFIX[harness]),
                                dialects=("chat",))
    info = endpoint.start()
    solver = AgentSolver(harness, model="teacher", base_url=info.base_url,
                         options=EpisodeOptions(timeout_seconds=240, max_calls=len(gold.tool_calls) + 4),
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


@pytest.mark.harness
@pytest.mark.bwrap
@pytest.mark.parametrize("harness", ["openclaw", "codex",
                                     pytest.param("zeroclaw", marks=pytest.mark.zeroclaw)])
def test_a_real_harness_passes_with_the_gold_calls_and_fails_with_a_wrong_one(harness, installed_harnesses):
    family, tasks = load_suite("claw-mini")
    good = next(t for t in tasks if t.task_id.startswith("mail-lookup"))
    bad = next(t for t in tasks if t.task_id.startswith("calendar-book"))
    try:
        gold = reference(family, good, None, "gold")
        result, records = _run(family, good, harness, gold)
        assert result.outcome.category == "resolved", (result.outcome, result.solution.agent.run)
        assert [(d.tool, d.arguments, d.status) for d in result.evidence.dispatches] == \
               [(c.tool, c.arguments, 200) for c in gold.tool_calls]
        shown = _tools_shown(records[0].request, PREFIX[harness])
        specs = {s.name: s.input_schema for s in family.parsed(good).tool_specs()}
        assert _strip_defaults(shown) == _strip_defaults(specs), "every task tool, with its schema, reaches the model"

        miss = reference(family, bad, None, "near_miss")
        result, _ = _run(family, bad, harness, miss)
        assert result.outcome.category == "unresolved", (result.outcome, result.solution.agent.run)
        assert [d.tool for d in result.evidence.dispatches] == [c.tool for c in miss.tool_calls]
        assert not result.outcome.tests["checks"]["booked_free_slot"]
        assert result.outcome.tests["checks"]["existing_events_kept"]
    finally:
        family.close()
