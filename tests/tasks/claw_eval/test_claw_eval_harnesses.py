"""A real harness on the mini Claw-Eval checkout: OpenClaw and Codex, driven by a scripted teacher
through the recording proxy and MCP, call the task's tools (each forwarded to the mock service);
the task's own grader passes the right calls and fails the wrong ones, reading the messages
rebuilt from the recorded model calls."""

from __future__ import annotations

from orchard_cli.family import RunOptions
import pytest

from orchard_cli.env import connect
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.rollout.user_model import UserConfig, UserModel
from orchard_cli.tasks.registry import load_suite

PREFIX = {"openclaw": "task__", "codex": "mcp__task__"}
RIGHT = [("notes_list", {}), ("notes_get", {"note_id": "n2"})]
WRONG = [("notes_list", {}), ("notes_get", {"note_id": "n3"})]


def _run(family, task, harness, calls, answer):
    turns = [{"tool_calls": [{"name": PREFIX[harness] + tool, "arguments": args}]} for tool, args in calls]
    endpoint = ScriptedEndpoint([*turns, {"content": answer}], dialects=("chat",))
    info = endpoint.start()
    solver = AgentSolver(harness, model="teacher", base_url=info.base_url,
                         options=EpisodeOptions(timeout_seconds=240, max_calls=len(calls) + 4),
                         proxy_options={"upstream_dialects": ["chat"]})
    env = connect("local")
    try:
        return run_episode(Episode(task=task, attempt=1, solver=solver, episode_id=f"{harness}-{len(calls)}-{answer[-5:]}"),
                           family=family, env=env, options=RunOptions())
    finally:
        solver.close()
        endpoint.stop()
        env.close()


@pytest.mark.harness
@pytest.mark.bwrap
@pytest.mark.parametrize("harness", ["openclaw", "codex"])
def test_a_real_harness_passes_with_the_right_calls_and_fails_with_wrong_ones(harness, installed_harnesses, mini):
    family, tasks = load_suite("claw-eval", dataset=str(mini), instances=["T01_find_code"])
    try:
        good = _run(family, tasks[0], harness, RIGHT, "Your gym locker code is 4417.")
        assert good.outcome.category == "resolved", (good.outcome, good.solution.agent.run)
        assert [(d.tool, d.arguments, d.status) for d in good.evidence.dispatches] == [(t, a, 200) for t, a in RIGHT]
        used = [b for m in good.evidence.state["messages"] for b in m["content"] if b["type"] == "tool_use"]
        assert [b["name"] for b in used] == ["notes_list", "notes_get"], "the harness's MCP prefix is gone"

        bad = _run(family, tasks[0], harness, WRONG, "Your gym locker code is 1299.")
        assert bad.outcome.category == "unresolved" and not bad.outcome.tests["benchmark_passed"]
    finally:
        family.close()


SHELL = {"codex": ("exec_command", "cmd"), "openclaw": ("exec", "command")}
ASK = {"bash": [("bash", {"command": "cat fixtures/gym.txt"}), ("bash", {"command": "task-tool notes_list"}),
                ("bash", {"command": "ls && task-tool notes_get '{\"note_id\": \"n2\"}'"})],
       "codex": [(SHELL["codex"][0], {"cmd": "cat fixtures/gym.txt"}), ("mcp__task__notes_list", {}),
                 (SHELL["codex"][0], {"cmd": "ls"}), ("mcp__task__notes_get", {"note_id": "n2"})]}
SEEN = {"bash": ["Bash", "notes_list", "notes_get", "Bash"], "codex": ["Bash", "notes_list", "Bash", "notes_get"]}
USED = {"bash": ["Bash", "notes_list", "Bash"], "codex": SEEN["codex"]}
"""The tool_use blocks of the messages: the call made inside a longer command has none (nor in the runner)."""


@pytest.mark.harness
@pytest.mark.bwrap
@pytest.mark.parametrize("harness", ["bash", "codex"])
def test_shell_commands_are_the_runners_bash_calls_for_the_grader(harness, installed_harnesses, mini):
    """Claw-Eval's runner records its shell as `Bash` tool calls among the task's own: a grader that
    counts them (T05's, as Claw-Eval's T068zh does) sees the harness's shell commands so, in order;
    a command that is only a `task-tool` call is that tool's dispatch, not a `Bash` call."""
    from orchard_cli.tasks.claw_eval.grading import request

    family, tasks = load_suite("claw-eval", dataset=str(mini), instances=["T05_shell_effort"])
    turns = [{"tool_calls": [{"name": name, "arguments": args}]} for name, args in ASK[harness]]
    endpoint = ScriptedEndpoint([*turns, {"content": "Riverside Fitness; your locker code is 4417."}], dialects=("chat",))
    solver = AgentSolver(harness, model="teacher", base_url=endpoint.start().base_url,
                         options=EpisodeOptions(timeout_seconds=240, max_calls=8),
                         proxy_options={"upstream_dialects": ["chat"]})
    env = connect("local")
    try:
        result = run_episode(Episode(task=tasks[0], attempt=1, solver=solver, episode_id=f"{harness}-shell"),
                             family=family, env=env, options=RunOptions(backend="local"))
    finally:
        solver.close()
        endpoint.stop()
        env.close()
        family.close()
    assert result.outcome.category == "resolved", (result.outcome, result.solution.agent.run)
    seen = request(tasks[0].record, result.evidence, None)["dispatches"]
    assert [d["tool_name"] for d in seen] == SEEN[harness]
    shells = [d for d in seen if d["tool_name"] == "Bash"]
    assert shells[0]["request_body"] == {"command": "cat fixtures/gym.txt"} and "Riverside" in shells[0]["response_body"]["stdout"]
    assert all(d["response_status"] == 200 and d["endpoint_url"] == "local://sandbox/Bash" for d in shells)
    used = [b["name"] for m in result.evidence.state["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert used == USED[harness]  # the messages name them as the runner does too
    assert [d.tool for d in result.evidence.dispatches] == ["notes_list", "notes_get"]


@pytest.mark.harness
@pytest.mark.bwrap
@pytest.mark.parametrize("harness", ["openclaw", "codex", "bash"])
def test_a_multi_turn_task_with_a_simulated_user(harness, installed_harnesses, mini, tmp_path):
    """The harness asks, the user model answers in its role (through its own recording proxy), the
    harness continues the same session with that answer after Claw-Eval's `[user_agent]` line, the
    user says it is done, and the task's own grader reads the whole conversation."""
    family, tasks = load_suite("claw-eval", dataset=str(mini), instances=["C01_needs_user"])
    teacher = ScriptedEndpoint([{"content": "Where would you like to go, and when?"},
                                {"content": "Plan: three days in Lisbon in May: Alfama, Belem, Sintra."}],
                               dialects=("chat",))
    user = ScriptedEndpoint(["Lisbon, three days in May.", "Thanks, that works. [DONE]"], dialects=("chat",))
    teacher_info, user_info = teacher.start(), user.start()
    solver = AgentSolver(harness, model="teacher", base_url=teacher_info.base_url,
                         options=EpisodeOptions(timeout_seconds=240, max_calls=6),
                         proxy_options={"upstream_dialects": ["chat"]},
                         user=UserModel(UserConfig(model="user", base_url=user_info.base_url)))
    env = connect("local")
    try:
        result = run_episode(Episode(task=tasks[0], attempt=1, solver=solver, episode_id=f"{harness}-dialogue",
                                     log_dir=tmp_path / "log"), family=family, env=env, options=RunOptions())
    finally:
        solver.close()
        teacher.stop()
        user.stop()
        env.close()
        family.close()
    agent = result.solution.agent
    assert result.outcome.category == "resolved", (result.outcome, agent.run, agent.errors, agent.turns)
    assert [t["user"].split("\n")[-1] for t in agent.turns][1:] == ["Lisbon, three days in May."]
    assert agent.turns[1]["user"].startswith("[user_agent]\n") and "Lisbon" in agent.turns[1]["assistant"]
    assert len(agent.user_records) == 2 and len(user.requests) == 2
    seen = user.requests[0]["body"]["messages"][1]["content"]
    assert "User: I want to plan a short trip" in seen and "Assistant: Where would you like to go" in seen
    assert "A traveller who wants three days in Lisbon" in user.requests[0]["body"]["messages"][0]["content"]
    later = str(teacher.requests[-1]["body"])  # the resumed session carries the whole conversation
    assert later.index("plan a short trip") < later.index("Where would you like to go") < later.index("[user_agent]")
    assert (tmp_path / "log" / "turns.json").is_file()


@pytest.mark.harness
@pytest.mark.bwrap
def test_distill_writes_claw_eval_trajectories_with_their_dispatches(installed_harnesses, mini, tmp_path):
    """`orchard distill claw-eval`: the teacher's episodes (Codex, the right calls) become
    trajectories carrying the task's tool calls as dispatches and Claw-Eval's verdict beside orchard's."""
    import json

    from orchard_cli.main import main

    turns = [{"tool_calls": [{"name": "mcp__task__" + tool, "arguments": args}]} for tool, args in RIGHT]
    teacher = ScriptedEndpoint([*turns, {"content": "Your gym locker code is 4417."}], dialects=("chat",))
    info = teacher.start()
    out = tmp_path / "t.jsonl"
    try:
        code = main(["distill", "claw-eval", "--dataset", str(mini), "--instances", "T01_find_code",
                     "--harness", "codex", "--teacher", "teacher", "--base-url", info.base_url, "--out", str(out),
                     "--max-calls", "8", "--timeout", "240"])
    finally:
        teacher.stop()
    assert code == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["task_id"] == "T01_find_code" and row["outcome"]["category"] == "resolved"
    assert [d["tool"] for d in row["evidence"]["dispatches"]] == ["notes_list", "notes_get"]
    assert row["outcome"]["details"]["benchmark_passed"] is True


@pytest.mark.harness
@pytest.mark.bwrap
def test_a_user_model_that_fails_is_not_the_agents_failure(installed_harnesses, mini):
    """The user model refuses (HTTP 401): the conversation ends after the first turn and the
    episode is an infra_error naming the simulated user, never 'unresolved'."""
    family, tasks = load_suite("claw-eval", dataset=str(mini), instances=["C01_needs_user"])
    teacher = ScriptedEndpoint([{"content": "Where would you like to go, and when?"}], dialects=("chat",))
    user = ScriptedEndpoint([{"status": 401}], cycle=True, dialects=("chat",))
    teacher_info, user_info = teacher.start(), user.start()
    solver = AgentSolver("bash", model="teacher", base_url=teacher_info.base_url,
                         options=EpisodeOptions(timeout_seconds=240, max_calls=4),
                         proxy_options={"upstream_dialects": ["chat"]},
                         user=UserModel(UserConfig(model="user", base_url=user_info.base_url)))
    env = connect("local")
    try:
        result = run_episode(Episode(task=tasks[0], attempt=1, solver=solver, episode_id="bash-user-fails"),
                             family=family, env=env, options=RunOptions())
    finally:
        solver.close()
        teacher.stop()
        user.stop()
        env.close()
        family.close()
    assert result.outcome.category == "infra_error", result.outcome
    assert "simulated user" in (result.outcome.error or "")
    assert len(result.solution.agent.turns) == 1 and len(teacher.requests) == 1
