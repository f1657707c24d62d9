"""The Responses API through the proxy: translated over a chat-only upstream, or passed through."""

from __future__ import annotations

import json

import pytest
from proxy_helpers import CHAT, client, sse_events

EXEC_TOOL = {"type": "function", "name": "exec_command", "description": "run a shell command", "strict": False,
             "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}


def codex_request(input_items, stream=True):
    """Shaped like the Codex CLI's requests: instructions, a developer message, tools, always stored=false."""
    return {"model": "m", "instructions": "You are a coding agent.", "input": input_items, "tools": [EXEC_TOOL],
            "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "low"},
            "store": False, "stream": stream, "include": [], "prompt_cache_key": "abc"}


USER = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: none."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]}]


def stream_events(episode, body):
    with client(episode).stream("POST", "/responses", json=body) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        return sse_events(resp.read())


def test_non_stream_responses_over_chat_only_upstream(scripted, proxy_for):
    upstream = scripted(["all done here"], dialects=("chat",))
    proxy = proxy_for(upstream)
    assert proxy.config.upstream_dialects == ["chat"]
    episode = proxy.open_episode()

    resp = client(episode).post("/responses", json=codex_request(USER, stream=False))

    assert resp.status_code == 200
    body = resp.json()
    assert body["object"] == "response" and body["status"] == "completed"
    [message] = body["output"]
    assert message["type"] == "message" and message["content"][0]["text"] == "all done here"
    assert body["usage"]["output_tokens"] == 3
    sent = upstream.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["messages"] == [
        {"role": "system", "content": "You are a coding agent.\n\nSandbox: none."},
        {"role": "user", "content": "list files"}]
    assert sent["body"]["tools"][0] == {"type": "function", "function": {
        "name": "exec_command", "description": "run a shell command", "parameters": EXEC_TOOL["parameters"]}}
    [record] = episode.records
    assert (record.endpoint, record.upstream_endpoint) == ("responses", "chat")
    assert record.response == body
    assert record.upstream_request == sent["body"]
    assert record.upstream_response["choices"][0]["message"]["content"] == "all done here"
    assert record.usage.output_tokens == 3


def test_stream_event_sequence_closes_every_item_before_completed(scripted, proxy_for):
    upstream = scripted([{"reasoning": "think first", "content": "running two commands",
                          "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls"}},
                                         {"name": "exec_command", "arguments": {"cmd": "pwd"}}]}],
                        dialects=("chat",))
    episode = proxy_for(upstream).open_episode()

    events = stream_events(episode, codex_request(USER))

    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.added"}
    done = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    assert sorted(added) == sorted(done) == [0, 1, 2, 3]
    assert [done[i]["type"] for i in range(4)] == ["reasoning", "message", "function_call", "function_call"]
    completed_at = kinds.index("response.completed")
    for index in done:  # each item: added, then done, all before response.completed
        at = {e["type"]: n for n, e in enumerate(events) if e.get("output_index") == index
              and e["type"] in ("response.output_item.added", "response.output_item.done")}
        assert at["response.output_item.added"] < at["response.output_item.done"] < completed_at
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "running two commands" == done[1]["content"][0]["text"]
    args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
                   and e["output_index"] == 2)
    assert json.loads(args) == {"cmd": "ls"} == json.loads(done[2]["arguments"])
    assert done[2]["call_id"] != done[3]["call_id"]
    completed = events[-1]["response"]
    assert completed["status"] == "completed" and completed["output"] == [done[i] for i in range(4)]
    assert completed["usage"]["output_tokens"] > 0
    [record] = episode.records
    assert record.stream and record.response == completed and record.error is None
    assert record.upstream_request["stream"] is True
    assert record.upstream_request["stream_options"] == {"include_usage": True}
    assert record.upstream_response["choices"][0]["message"]["reasoning_content"] == "think first"


def test_function_call_round_trip(scripted, proxy_for):
    upstream = scripted([{"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls"}, "id": "call_A"}]},
                         "I see a.txt"], dialects=("chat",))
    episode = proxy_for(upstream).open_episode()

    first = stream_events(episode, codex_request(USER))
    [call] = [e["item"] for e in first if e["type"] == "response.output_item.done"]
    assert call["type"] == "function_call" and call["call_id"] == "call_A"
    turn2 = USER + [call, {"type": "function_call_output", "call_id": call["call_id"], "output": "a.txt\n"}]
    second = stream_events(episode, codex_request(turn2))

    assert second[-1]["response"]["output"][0]["content"][0]["text"] == "I see a.txt"
    messages = upstream.requests[1]["body"]["messages"]
    assert messages[-2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_A", "type": "function", "function": {"name": "exec_command", "arguments": '{"cmd": "ls"}'}}]}
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_A", "content": "a.txt\n"}
    assert [r.seq for r in episode.records] == [0, 1]


def test_custom_tools_are_carried_as_one_string_argument(scripted, proxy_for):
    patch = "*** Begin Patch\n*** End Patch\n"
    upstream = scripted([{"tool_calls": [{"name": "apply_patch", "arguments": {"input": patch}}]}, "ok"],
                        dialects=("chat",))
    episode = proxy_for(upstream).open_episode()
    body = {**codex_request(USER), "tools": [{"type": "custom", "name": "apply_patch", "description": "patch"}]}

    events = stream_events(episode, body)
    [item] = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert item["type"] == "custom_tool_call" and item["input"] == patch

    back = USER + [item, {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": "Done"}]
    client(episode).post("/responses", json={**body, "input": back, "stream": False})
    sent = upstream.requests[1]["body"]
    assert sent["tools"][0]["function"]["parameters"]["required"] == ["input"]
    assert json.loads(sent["messages"][-2]["tool_calls"][0]["function"]["arguments"]) == {"input": patch}


def test_max_tokens_finish_gives_an_incomplete_response(scripted, proxy_for):
    upstream = scripted([{"content": "cut short", "finish_reason": "length"}], dialects=("chat",))
    episode = proxy_for(upstream).open_episode()
    events = stream_events(episode, {"model": "m", "input": "hi", "stream": True, "max_output_tokens": 2})
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert upstream.requests[0]["body"]["max_tokens"] == 2


def test_responses_pass_through_to_a_responses_upstream(scripted, proxy_for):
    upstream = scripted(["native answer"])  # speaks chat and responses
    proxy = proxy_for(upstream)
    assert proxy.config.upstream_dialects == ["chat", "responses"]
    episode = proxy.open_episode()

    events = stream_events(episode, {"model": "m", "input": "hi", "stream": True})

    assert upstream.requests[0]["path"] == "/v1/responses"
    [record] = episode.records
    assert (record.endpoint, record.upstream_endpoint) == ("responses", "responses")
    assert record.upstream_request is None  # forwarded byte for byte
    assert record.response == events[-1]["response"]
    assert record.usage.output_tokens == 2


def test_untranslatable_requests_are_refused_and_recorded(scripted, proxy_for):
    upstream = scripted(["x"], dialects=("chat",))
    episode = proxy_for(upstream).open_episode()
    resp = client(episode).post("/responses", json={"model": "m", "input": "hi", "previous_response_id": "resp_1"})
    assert resp.status_code == 400 and "previous_response_id" in resp.json()["error"]["message"]
    [record] = episode.records
    assert record.error.type == "translation" and record.upstream_endpoint is None  # never forwarded
    assert upstream.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_chat_over_a_responses_only_upstream_is_not_supported(scripted, proxy_for, stream):
    upstream = scripted(["x"])
    episode = proxy_for(upstream, upstream_dialects=["responses"]).open_episode()
    resp = client(episode).post("/chat/completions", json={**CHAT, "stream": stream})
    assert resp.status_code == 501 and "not supported" in resp.json()["error"]["message"]
    assert episode.records[0].error.type == "translation"
