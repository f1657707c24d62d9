"""The demonstrator `gold`: a reference as moves, each written in the format of the request it
answers, and the endpoint behind the real recording proxy (which names each call's episode)."""

from __future__ import annotations

import json

import httpx
import pytest

from orchard_cli.models.gold import EPISODE_HEADER, GoldEndpoint
from orchard_cli.models.gold_moves import MoveError, moves_of, reply
from orchard_cli.proxy import start_proxy


def _tool(name: str, **params: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {k: {"type": v} for k, v in params.items()}, "required": list(params)}}}


BASH = _tool("bash", command="string")
REFERENCE = {"commands": ["python3 make.py"], "answer": "All done.",
             "tool_calls": [{"tool": "send_message", "arguments": {"to": ["a@x.test"], "body": "it's 4"}}]}


def test_moves_follow_the_gold_solver_order_and_end_with_the_answer():
    moves = moves_of({"patch": "diff --git a/f b/f\n", **REFERENCE})
    assert [m.kind for m in moves] == ["command", "command", "tool", "answer"]
    assert moves[0].text.startswith("git apply") and "diff --git a/f b/f\n" in moves[0].text
    assert moves[-1].text == "All done."
    web = moves_of({"tool_calls": [{"tool": "click", "arguments": {"selector": "#go"}},
                                   {"tool": "answer", "arguments": {"text": "42"}}]})
    assert [m.kind for m in web] == ["tool", "tool"]  # the web answer is an action: nothing after it


def test_each_harness_gets_its_own_format():
    moves = moves_of(REFERENCE)
    bash = {"tools": [BASH]}
    assert reply(moves[0], bash) == ("", [("bash", {"command": "python3 make.py"})])
    content, [(name, args)] = reply(moves[1], bash)  # orchard's bash agent: task-tool through its shell
    assert name == "bash" and args["command"] == ("task-tool send_message "
                                                  "'{\"to\": [\"a@x.test\"], \"body\": \"it'\"'\"'s 4\"}'")
    codex = {"tools": [_tool("exec_command", cmd="string"), _tool("mcp__task__send_message", to="array")]}
    assert reply(moves[0], codex) == ("", [("exec_command", {"cmd": "python3 make.py"})])
    assert reply(moves[1], codex)[1][0][0] == "mcp__task__send_message"
    openclaw = {"tools": [_tool("exec", command="string"), _tool("task__send_message", to="array")]}
    assert reply(moves[1], openclaw)[1][0] == ("task__send_message", REFERENCE["tool_calls"][0]["arguments"])
    assert reply(moves[2], openclaw) == ("All done.", [])
    with pytest.raises(MoveError, match="no shell tool"):
        reply(moves[0], {"tools": [_tool("task__send_message", to="array")]})


def test_web_steps_become_browsergym_actions_with_the_pages_ids():
    moves = moves_of({"tool_calls": [{"tool": "fill", "arguments": {"selector": "#q", "value": "red mug"}},
                                     {"tool": "press", "arguments": {"selector": "#q", "key": "Enter"}},
                                     {"tool": "goto", "arguments": {"url": "shop:/cart"}},
                                     {"tool": "click", "arguments": {"selector": "text=pharetra"}},
                                     {"tool": "answer", "arguments": {"text": "Blue \"Mug\""}}]})
    page = {"#q": {"bid": "e7"}, "text=pharetra": {"ancestor": "e4", "x": 120, "y": 48}}
    texts = [reply(m, {"messages": []}, page.get)[0] for m in moves]
    assert texts == ['fill("e7", "red mug")', 'press("e7", "Enter")', 'goto("shop:/cart")',
                     "mouse_click(120, 48)", 'answer("Blue \\"Mug\\"")']
    with pytest.raises(MoveError, match="no element on the page"):
        reply(moves[0], {"messages": []}, lambda selector: None)
    miniwob = moves_of({"tool_calls": [{"tool": "click", "arguments": {"selector": "#subbtn"}}]})
    assert [(m.kind, m.name, m.arguments) for m in miniwob][-1] == ("tool", "answer", {"text": "done"})


@pytest.fixture
def gold_proxy():
    endpoint = GoldEndpoint()
    endpoint.start()
    proxy = start_proxy(endpoint, model="gold", episode_header=True, retry_backoff_s=0.01)
    yield endpoint, proxy
    proxy.stop()
    endpoint.stop()


def _chat(episode, **extra):
    body = {"model": "m", "messages": [{"role": "user", "content": "do it"}], "tools": [BASH], **extra}
    return httpx.post(f"{episode.base_url}/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {episode.api_key}"}, timeout=30)


def test_gold_answers_each_episode_from_its_own_reference(gold_proxy):
    endpoint, proxy = gold_proxy
    first, second = proxy.open_episode("ep-one"), proxy.open_episode("ep-two")
    endpoint.begin_episode("ep-one", REFERENCE)
    endpoint.begin_episode("ep-two", {"answer": "Paris"})
    assert _chat(second).json()["choices"][0]["message"]["content"] == "Paris"
    calls = [_chat(first, stream=k == 1) for k in range(3)]
    assert calls[0].json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == \
        json.dumps({"command": "python3 make.py"})
    assert "task-tool send_message" in calls[1].text  # streamed: the call comes as SSE chunks
    assert calls[2].json()["choices"][0]["message"]["content"] == "All done."
    over = _chat(first)
    assert over.status_code == 400 and "no move left" in over.json()["error"]["message"]
    report = endpoint.end_episode("ep-one")
    assert (report.played, report.moves, report.complete) == (3, 3, False)  # the extra call is an error
    assert [r.seq for r in first.records] == [0, 1, 2, 3]


def test_gold_needs_the_proxy_to_name_the_episode(gold_proxy):
    endpoint, _ = gold_proxy
    endpoint.begin_episode("ep-one", REFERENCE)
    direct = httpx.post(f"{endpoint.url}/v1/chat/completions", json={"model": "m", "messages": [
        {"role": "user", "content": "hi"}]}, timeout=30)
    assert direct.status_code == 400 and EPISODE_HEADER in direct.json()["error"]["message"]
    stranger = httpx.post(f"{endpoint.url}/v1/chat/completions", headers={EPISODE_HEADER: "ep-x"},
                          json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert stranger.status_code == 400 and "no reference for episode 'ep-x'" in stranger.text
