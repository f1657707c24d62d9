"""Multi-turn harness runs: each harness that declares `multi_turn` runs two turns of one
conversation in one sandbox (turn 1 with `session`, turn 2 with `resume` and the user's next
message) against a scripted model, through the real recording proxy; the second turn's first model
request carries turn 1's user prompt, turn 1's reply and the new message, in that order."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchard_cli.errors import UsageError
from orchard_cli.harnesses import harnesses, load_harness
from orchard_cli.rollout.agent import AgentSolver
from orchard_cli.tools import ToolAccess, ToolReply, ToolSession, ToolSpec

pytestmark = [pytest.mark.harness, pytest.mark.bwrap]

FIRST = "Turn one: what does hello.txt say?"
REPLY = "It says hello, as committed."
SECOND = "Turn two: and in capitals?"
SESSION = "conv-7"
MULTI_TURN = {"bash", "codex", "openclaw", "web"}


class Page:
    """A one-page browser: every action shows the same page (the web agent's tools, and a task
    tool Codex loads over MCP)."""

    def call(self, service: str, action: str, arguments: dict[str, Any]) -> ToolReply:
        return ToolReply(result="Accessibility tree:\n[ref=e1] heading 'hello'")


def tool_session(rig) -> ToolSession:
    """An episode (replacing the rig's; before the sandbox, which reaches only its episode) whose
    tool gateway serves `observe` and `answer`."""
    specs = [ToolSpec(name="observe", description="Show the page.", service="browser", action="observe"),
             ToolSpec(name="answer", description="Answer the user.", service="browser", action="answer",
                      input_schema={"type": "object", "properties": {"text": {"type": "string"}}})]
    session = ToolSession(specs, Page())
    rig.episode = rig.proxy.open_episode("resume-test-tools", max_calls=10, tools=session)
    return session


def two_turns(rig, harness, *, with_tools: bool = False, **fields: Any):
    """Run turn 1 and the resumed turn 2; return both runs and the first request of each."""
    session = tool_session(rig) if with_tools else None
    sandbox = rig.sandbox(harness)
    context = rig.context(sandbox, prompt=FIRST, session=SESSION, **fields)
    if session is not None:
        context.tools = ToolAccess(specs=session.public(), url=context.base_url.removesuffix("/v1") + "/tools",
                                   token=context.api_key)
    first = harness.run(sandbox, context)
    assert first.exit_code == 0 and first.error is None, first
    asked = len(rig.episode.records)
    second = harness.run(sandbox, context.model_copy(update={"prompt": SECOND, "resume": True}))
    assert second.exit_code == 0 and second.error is None, second
    records = rig.episode.records
    assert all(r.status == 200 for r in records) and len(records) > asked
    return first, second, records[0].request, records[asked].request


def in_order(text: str, *parts: str) -> bool:
    at = [text.find(part) for part in parts]
    return -1 not in at and at == sorted(at)


def test_codex_resumes_its_thread_with_the_same_tools(rig, installed_harnesses):
    rig.start([REPLY, "HELLO."])
    first, second, one, two = two_turns(rig, load_harness("codex"), with_tools=True)
    assert first.info["thread_id"] and second.info["thread_id"] == first.info["thread_id"], (first.info, second.info)
    assert in_order(json.dumps(two["input"]), FIRST, REPLY, SECOND)
    assert two["tools"] == one["tools"]      # the task's tools (an MCP namespace) stay
    task = next(t for t in two["tools"] if t.get("name") == "mcp__task")
    assert {t["name"] for t in task["tools"]} == {"observe", "answer"}
    assert second.info["last_message"] == "HELLO."


def test_openclaw_continues_its_session(rig, installed_harnesses):
    rig.start([REPLY, "HELLO."], max_calls=6)
    first, second, one, two = two_turns(rig, load_harness("openclaw"), timeout_seconds=240)
    assert first.info["session_id"] == second.info["session_id"] == SESSION
    assert in_order(json.dumps(two["messages"]), FIRST, REPLY, SECOND)
    assert FIRST in json.dumps(one["messages"]) and SECOND not in json.dumps(one["messages"])
    assert [t["function"]["name"] for t in one["tools"]] == [t["function"]["name"] for t in two["tools"]]
    assert second.info["last_message"] == "HELLO." and rig.changed(rig.sandboxes[0]) == []


def test_bash_agent_reloads_its_history(rig, installed_harnesses):
    rig.start([REPLY, "HELLO."])
    first, second, one, two = two_turns(rig, load_harness("bash"))
    assert [m["role"] for m in two["messages"]] == ["system", "user", "assistant", "user"]
    assert [m["content"] for m in two["messages"][1:]] == [FIRST, REPLY, SECOND]
    assert two["messages"][0] == one["messages"][0]   # the conversation's own system prompt
    assert second.info["resumed_messages"] == "3" and rig.changed(rig.sandboxes[0]) == []


def test_web_agent_shows_the_conversation(rig, installed_harnesses):
    rig.start([f'answer("{REPLY}")', 'answer("HELLO")'])
    first, second, one, two = two_turns(rig, load_harness("web"), with_tools=True)
    assert "# Task\n" + FIRST in one["messages"][1]["content"]
    shown = two["messages"][1]["content"]
    assert "# Conversation" in shown and in_order(shown, f"User: {FIRST}", f"You: {REPLY}", f"User: {SECOND}")
    assert [d.tool for d in rig.episode.tools.dispatches] == ["observe", "answer", "observe", "answer"]


def test_a_resumed_turn_without_its_first_turn_says_so(rig, installed_harnesses):
    rig.start(["never asked"])
    for name in ("codex", "openclaw", "bash"):
        harness = load_harness(name)
        sandbox = rig.sandbox(harness)
        run = harness.run(sandbox, rig.context(sandbox, prompt=SECOND, session="never-started", resume=True))
        assert run.error and "never-started" in run.error, (name, run)
    assert rig.episode.records == []


def test_only_the_harnesses_that_continue_a_conversation_claim_to():
    claimed = {name for name in harnesses.names() if getattr(harnesses.load(name), "multi_turn", False)}
    assert claimed == MULTI_TURN            # chat and zeroclaw run single-turn episodes only
    with pytest.raises(UsageError, match="cannot continue a conversation"):
        AgentSolver("chat", model="m", base_url="scripted", user=object())


def test_codex_and_openclaw_command_lines_for_a_conversation():
    from orchard_cli.harnesses.base import HarnessContext

    context = HarnessContext(prompt="-next", model="m", base_url="http://127.0.0.1:9/e/t/v1", api_key="t",
                             session=SESSION, resume=True)
    codex = load_harness("codex")
    argv = codex.argv(context, "/workspace", thread="th-1")
    assert argv[2:6] == ["exec", "-C", "/workspace", "resume"] and argv[-3:] == ["--", "th-1", "-next"]
    assert "--ephemeral" not in argv and "--ephemeral" in codex.argv(context.model_copy(update={"session": None}), "/w")
    assert codex.argv(context, "/workspace", thread="th-1", prompt_on_stdin=True)[-2:] == ["th-1", "-"]
    argv = load_harness("openclaw").argv(context, "/workspace")
    assert argv[2:6] == ["agent", "--local", "--session-id", SESSION] and "exec" not in argv


def test_openclaw_local_results_read_as_exec_envelopes():
    from orchard_cli.harnesses.base import HarnessRun
    from orchard_cli.harnesses.openclaw import inspect_result

    def read(result: dict[str, Any], exit_code: int = 0) -> HarnessRun:
        run = HarnessRun(exit_code=exit_code)
        inspect_result(run, json.dumps(result, indent=2))
        return run

    ok = read({"payloads": [{"text": "Done."}], "meta": {"stopReason": "stop", "toolSummary": {"calls": 2},
                                                          "agentMeta": {"sessionId": SESSION, "assistantTurns": 3}}})
    assert ok.error is None and ok.info == {"status": "ok", "tool_calls": "2", "turns": "3", "session_id": SESSION,
                                            "last_message": "Done."}
    late = read({"payloads": [], "meta": {"stopReason": "timeout", "agentMeta": {}}}, exit_code=1)
    assert late.info["status"] == "timeout" and late.error == "openclaw: timeout"
    failed = read({"payloads": [{"text": "rate limited", "isError": True}], "meta": {"agentMeta": {}}}, 1)
    assert failed.error == "openclaw: rate limited" and "last_message" not in failed.info
