"""What reads claw episodes: `train` renders their MCP tool calls in the student's tool format,
`view` shows the dispatches, the change of the service state and the protocol logs."""

from __future__ import annotations

import json

from orchard_cli.conversation import conversation
from orchard_cli.evidence import Dispatch, Evidence
from orchard_cli.models.toolcall import render_messages
from orchard_cli.proxy.calls import CallRecord, CallTiming
from orchard_cli.trajectory import Trajectory, TrajectoryOutcome
from orchard_cli.view import render_page

SEND = {"to": ["tara@x.test"], "subject": "Re: room", "body": "Room B-214."}
SCHEMA = {"type": "object", "properties": {"to": {"type": "array"}, "subject": {"type": "string"},
                                           "body": {"type": "string"}}, "required": ["to", "subject", "body"]}


def _codex_call() -> CallRecord:
    """A Codex call as the proxy records it: Responses, the task tools as an MCP namespace."""
    request = {"model": "m", "instructions": "You are Codex.",
               "input": [{"type": "message", "role": "user", "content": "Reply to Tara."}],
               "tools": [{"type": "namespace", "name": "mcp__task", "description": "task tools",
                          "tools": [{"type": "function", "name": "send_message", "description": "Send a mail.",
                                     "parameters": SCHEMA}]}]}
    response = {"output": [{"type": "function_call", "namespace": "mcp__task", "name": "send_message",
                            "call_id": "c1", "arguments": json.dumps(SEND)}]}
    return CallRecord(id="call-1", episode="e", seq=0, endpoint="responses", status=200, request=request,
                      response=response, timing=CallTiming(started_at=0.0, ended_ms=1.0))


def test_train_renders_an_mcp_tool_call_in_the_students_format():
    messages, tools = conversation([_codex_call()])
    call = messages[-1]["tool_calls"][0]["function"]
    assert call["name"] == "mcp__task__send_message" and json.loads(call["arguments"]) == SEND
    assert [t["function"]["name"] for t in tools] == ["mcp__task__send_message"]
    assert tools[0]["function"]["parameters"] == SCHEMA
    plain = render_messages(messages, tools)
    text = "\n".join(m["content"] for m in plain)
    assert "mcp__task__send_message" in text and "B-214" in text  # the offer and the call, rendered


def test_view_shows_dispatches_state_changes_and_protocol_logs():
    before = {"sent": [], "mailboxes": {"INBOX": [{"id": "m1", "subject": "Which room?"}]}}
    after = {"sent": [{"id": "s1", "to": ["tara@x.test"], "body": "Room B-214."}], "mailboxes": before["mailboxes"]}
    evidence = Evidence(answer="Replied.", state={"mail": after}, state_before={"mail": before},
                        dispatches=[Dispatch(seq=0, tool="send_message", arguments=SEND, status=200, result={"id": "s1"})],
                        logs={"imap": "A1 LOGIN sam ***\nA2 SELECT INBOX\n"})
    trajectory = Trajectory(episode_id="ep", task_id="mail-reply-1", suite="claw-mini", family="claw",
                            harness="codex", model="m", outcome=TrajectoryOutcome(resolved=True, category="resolved"),
                            evidence=evidence)
    page = render_page([trajectory], "claw")
    assert "Tool dispatches (1)" in page and "send_message" in page
    assert "Changes to mail" in page and "+" in page and "B-214" in page
    assert "imap protocol log" in page and "SELECT INBOX" in page
