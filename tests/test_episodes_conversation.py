"""The normalised conversation of an episode, from calls the real recording proxy recorded: the
Responses dialect (what the Codex CLI speaks, here over a chat-only upstream) and streamed chat
both come out as OpenAI chat messages with tool calls, and tool schemas in chat form."""

from __future__ import annotations

import json
import urllib.request

from orchard_cli.conversation import conversation, main_call
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.proxy import start_proxy

TOOL_REPLY = {"content": "Looking.", "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls"}, "id": "c2"}]}


def post(url: str, token: str, body: dict) -> bytes:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


def test_a_streamed_responses_call_becomes_chat_messages():
    body = {"model": "m", "stream": True, "instructions": "You are Codex.",
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
                      {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
                      {"type": "function_call", "call_id": "c1", "name": "exec_command",
                       "arguments": json.dumps({"cmd": "cat a.py"})},
                      {"type": "function_call_output", "call_id": "c1", "output": "print(1)"}],
            "tools": [{"type": "function", "name": "exec_command", "description": "run",
                       "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
                      {"type": "custom", "name": "apply_patch", "description": "patch"},
                      {"type": "web_search"}]}
    with ScriptedEndpoint([TOOL_REPLY], dialects=("chat",)) as info, start_proxy(info.base_url) as proxy:
        episode = proxy.open_episode("e1")
        raw = post(f"{episode.base_url}/responses", episode.api_key, body)
        assert b"response.completed" in raw
        episode.close()
        records = episode.records
    assert records[0].endpoint == "responses" and records[0].upstream_endpoint == "chat"
    messages, tools = conversation(records)
    assert messages == [
        {"role": "system", "content": "You are Codex."},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "exec_command", "arguments": '{"cmd": "cat a.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "exec_command", "arguments": '{"cmd": "ls"}'}}]},
    ]
    assert [t["function"]["name"] for t in tools] == ["exec_command", "apply_patch"]  # hosted tools dropped
    assert tools[1]["function"]["parameters"]["required"] == ["input"]


def test_a_streamed_chat_episode_takes_its_longest_conversation():
    first = {"model": "m", "stream": True, "messages": [
        {"role": "system", "content": [{"type": "text", "text": "sys"}]}, {"role": "user", "content": "go"}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]}
    second = {**first, "messages": [*first["messages"],
                                    {"role": "assistant", "content": "", "tool_calls": [
                                        {"id": "c1", "type": "function",
                                         "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
                                    {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]}
    title = {"model": "m", "messages": [{"role": "user", "content": "a title for this chat"}]}
    replies = [{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}, "id": "c1"}]},
               {"content": "done", "reasoning": "it is listed"}, {"content": "A title"}, {"status": 500}]
    with ScriptedEndpoint(replies, dialects=("chat",)) as info, \
            start_proxy(info.base_url, max_retries=0) as proxy:
        episode = proxy.open_episode("e2")
        for body in (first, second, title):
            post(f"{episode.base_url}/chat/completions", episode.api_key, body)
        try:
            post(f"{episode.base_url}/chat/completions", episode.api_key, second)
        except urllib.error.HTTPError as exc:
            assert exc.code == 500
        episode.close()
        records = episode.records
    assert len(records) == 4 and records[3].error is not None
    assert main_call(records).seq == 1  # not the side call (a title), not the failed one
    messages, tools = conversation(records)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == "sys"  # text parts folded into a string
    assert messages[-1] == {"role": "assistant", "content": "done", "reasoning_content": "it is listed"}
    assert tools == [{"type": "function", "function": {"name": "bash", "description": "",
                                                       "parameters": {"type": "object"}}}]


def test_no_calls_no_conversation():
    assert conversation([]) == ([], [])
