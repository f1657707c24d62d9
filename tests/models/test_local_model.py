"""The embedded model, for real: SmolLM2-135M-Instruct served by orchard's CPU server.

One model load per session (tests/models/conftest.py); few generated tokens per request. Greedy
decoding is deterministic, so the streamed and whole answers to one request must be identical.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchard_cli.proxy.sse import assemble_chat_stream, sse_json

pytestmark = pytest.mark.model

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
EXEC = {"type": "function", "function": {
    "name": "exec_command", "description": "Run a shell command and return its output.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string", "description": "the command"}},
                   "required": ["cmd"]}}}
AGENT = [{"role": "system", "content": "You are a coding agent. Use the exec_command tool to run commands."},
         {"role": "user", "content": "List the files in the current directory."}]


def post(url: str, path: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=300, **kw)


@pytest.fixture(scope="module")
def answer(smollm2_url: str) -> dict[str, Any]:
    body = {"model": "smollm2", "messages": QUESTION, "max_tokens": 16, "logprobs": True, "top_logprobs": 2,
            "return_token_ids": True}
    resp = post(smollm2_url, "/chat/completions", body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_chat_completion_returns_text(answer):
    [choice] = answer["choices"]
    assert answer["object"] == "chat.completion" and answer["model"] == "smollm2"
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"].strip()
    assert choice["message"]["role"] == "assistant" and "tool_calls" not in choice["message"]
    assert choice["finish_reason"] in ("stop", "length")
    usage = answer["usage"]
    assert usage["prompt_tokens"] > 5 and 1 <= usage["completion_tokens"] <= 16
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_logprobs_and_token_ids_when_asked(answer, smollm2, smollm2_url):
    [choice] = answer["choices"]
    ids, entries = choice["token_ids"], choice["logprobs"]["content"]
    assert len(ids) == len(entries)
    if choice["finish_reason"] == "stop":  # as vLLM: the end-of-turn token the model sampled comes last
        assert ids[-1] in smollm2.stop_ids and len(ids) == answer["usage"]["completion_tokens"] + 1
        assert smollm2.decode(ids[:-1]) == choice["message"]["content"]
    else:
        assert len(ids) == answer["usage"]["completion_tokens"] and smollm2.decode(ids) == choice["message"]["content"]
    assert answer["prompt_token_ids"] == smollm2.encode_chat(QUESTION)
    for token_id, entry in zip(ids, entries):
        assert entry["token"] == smollm2.decode([token_id]) and entry["bytes"] == list(entry["token"].encode())
        assert entry["logprob"] <= 0 and len(entry["top_logprobs"]) == 2
        top = [t["logprob"] for t in entry["top_logprobs"]]
        assert top == sorted(top, reverse=True)
        assert entry["logprob"] == pytest.approx(top[0])  # greedy: the chosen token is the most likely
    plain = post(smollm2_url, "/chat/completions",
                 {"messages": QUESTION, "max_tokens": 16}).json()
    assert "token_ids" not in plain["choices"][0] and plain["choices"][0]["logprobs"] is None
    assert "prompt_token_ids" not in plain


def test_streamed_completion_is_sse_ending_with_done_and_matches(smollm2_url, answer):
    body = {"messages": QUESTION, "max_tokens": 16, "stream": True, "stream_options": {"include_usage": True},
            "logprobs": True, "top_logprobs": 2, "return_token_ids": True}
    with httpx.stream("POST", f"{smollm2_url}/chat/completions", json=body, timeout=300) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        blob = resp.read()
    blocks = [b for b in blob.decode().split("\n\n") if b]
    assert all(b.startswith("data: ") for b in blocks)
    assert blocks[-1] == "data: [DONE]"
    chunks = sse_json(blob)
    assert len(chunks) >= 4 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["total_tokens"] == answer["usage"]["total_tokens"]
    # the previous request had the same prompt: all of it but the last token came from the kept cache
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1
    whole = assemble_chat_stream(blob)
    [choice], [expected] = whole["choices"], answer["choices"]
    assert choice["message"]["content"] == expected["message"]["content"]
    assert choice["finish_reason"] == expected["finish_reason"]
    assert choice["token_ids"] == expected["token_ids"] and whole["prompt_token_ids"] == answer["prompt_token_ids"]
    assert [e["logprob"] for e in choice["logprobs"]["content"]] == pytest.approx(
        [e["logprob"] for e in expected["logprobs"]["content"]], abs=1e-4)


def test_an_agent_next_turn_reuses_the_kept_prefix_and_answers_the_same(smollm2):
    first = smollm2.encode_chat(QUESTION)
    said = smollm2.decode([s.token_id for s in smollm2.steps(first, max_tokens=6)])
    turn2 = smollm2.encode_chat(QUESTION + [{"role": "assistant", "content": said},
                                            {"role": "user", "content": "And 3+3?"}])
    reused = [(s.token_id, s.logprob) for s in smollm2.steps(turn2, max_tokens=8)]
    assert smollm2.last_reused >= len(first)  # only the new turn was processed
    smollm2.forget()
    fresh = [(s.token_id, s.logprob) for s in smollm2.steps(turn2, max_tokens=8)]
    assert smollm2.last_reused == 0
    assert [t for t, _ in reused] == [t for t, _ in fresh]
    assert [lp for _, lp in reused] == pytest.approx([lp for _, lp in fresh], abs=1e-3)


def _check_reply(message: dict[str, Any]) -> None:
    """Either plain content or well-formed tool calls to an offered tool."""
    calls = message.get("tool_calls") or []
    assert calls or isinstance(message["content"], str)
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert call["function"]["name"] == "exec_command"
        assert isinstance(json.loads(call["function"]["arguments"]), dict)


def test_tools_offered_give_content_or_well_formed_calls_streamed_or_not(smollm2_url):
    body = {"messages": AGENT, "tools": [EXEC], "max_tokens": 32}
    whole = post(smollm2_url, "/chat/completions", body).json()
    [choice] = whole["choices"]
    _check_reply(choice["message"])
    assert choice["finish_reason"] == "tool_calls" if choice["message"].get("tool_calls") else \
        choice["finish_reason"] in ("stop", "length")
    assert whole["usage"]["prompt_tokens"] > 60  # the tools section is in the prompt
    streamed = assemble_chat_stream(post(smollm2_url, "/chat/completions", {**body, "stream": True}).content)
    got, want = streamed["choices"][0], choice
    assert got["message"]["content"] == want["message"]["content"]
    assert got["finish_reason"] == want["finish_reason"]
    strip = [(c["function"]["name"], c["function"]["arguments"]) for c in want["message"].get("tool_calls") or []]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in got["message"].get("tool_calls") or []] \
        == strip


def test_a_forced_tool_choice_yields_a_call_or_the_error_note(smollm2_url):
    body = {"messages": AGENT, "tools": [EXEC], "max_tokens": 32,
            "tool_choice": {"type": "function", "function": {"name": "exec_command"}}}
    message = post(smollm2_url, "/chat/completions", body).json()["choices"][0]["message"]
    if message.get("tool_calls"):
        _check_reply(message)
    else:  # the model wrote something unparsable after the forced start: told so, as plain content
        assert message["content"].startswith('<tool_call>\n{"name": "exec_command", "arguments": ')
        assert "[orchard: tool call not understood: " in message["content"]


def test_responses_stream_has_the_full_event_sequence(smollm2_url, answer):
    body = {"model": "smollm2", "input": "What is 2+2?", "max_output_tokens": 32, "stream": True}
    resp = post(smollm2_url, "/responses", body)
    assert resp.status_code == 200
    events = sse_json(resp.content)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    for needed in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
                   "response.output_text.done", "response.content_part.done", "response.output_item.done"):
        assert needed in kinds, needed
    assert kinds.index("response.output_item.done") < kinds.index("response.completed")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    text = final["output"][0]["content"][0]["text"]
    assert text == answer["choices"][0]["message"]["content"]  # same prompt, same greedy answer
    assert final["usage"]["output_tokens"] == answer["usage"]["completion_tokens"]
    whole = post(smollm2_url, "/responses", {**body, "stream": False}).json()
    assert whole["status"] == "completed" and whole["output"][0]["content"][0]["text"] == text


def test_bad_requests_are_openai_errors(smollm2_url, smollm2):
    cases = [({"messages": []}, 400, None), ({"messages": QUESTION, "n": 2}, 400, None),
             ({"messages": QUESTION, "temperature": 9}, 400, None),
             ({"messages": QUESTION, "max_tokens": 0}, 400, None),
             ({"messages": [{"role": "user", "content": "apple " * (smollm2.context + 10)}]}, 400,
              "context_length_exceeded")]
    for body, status, code in cases:
        resp = post(smollm2_url, "/chat/completions", body)
        assert resp.status_code == status, body
        assert resp.json()["error"]["message"]
        if code:
            assert resp.json()["error"]["code"] == code
    assert httpx.post(f"{smollm2_url}/chat/completions", content=b"{not json", timeout=30).status_code == 400
    models = httpx.get(f"{smollm2_url}/models", timeout=30).json()
    assert models["data"][0]["id"] == "smollm2" and models["data"][0]["max_model_len"] == smollm2.context
    assert httpx.get(smollm2_url.removesuffix("/v1") + "/health", timeout=30).json()["status"] == "ok"


def test_api_key_is_required_when_named(smollm2, monkeypatch):
    from orchard_cli.models import load_endpoint

    monkeypatch.setenv("ORCHARD_TEST_SERVE_KEY", "s3cret")
    endpoint = load_endpoint("smollm2", key_env="ORCHARD_TEST_SERVE_KEY", cache=False)
    with endpoint as info:
        body = {"messages": QUESTION, "max_tokens": 1}
        assert post(info.base_url, "/chat/completions", body).status_code == 401
        ok = post(info.base_url, "/chat/completions", body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 1


def test_a_client_that_goes_away_stops_its_generation(smollm2_url, smollm2):
    # at temperature 2 the model almost never ends its turn: 2000 tokens would hold it for minutes
    body = {"messages": [{"role": "user", "content": "Write a long story."}], "temperature": 2.0, "seed": 7,
            "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", f"{smollm2_url}/chat/completions", json=body, timeout=300) as resp:
        seen = 0
        for _ in resp.iter_lines():
            seen += 1
            if seen >= 6:
                break
    def busy() -> bool:  # the batch still holds it (batching on), or the one generation still runs
        batch = httpx.get(f"{smollm2_url.removesuffix('/v1')}/health", timeout=30).json().get("batch")
        return batch["running"] + batch["waiting"] > 0 if batch else smollm2.lock.locked()

    started = time.monotonic()
    while busy() and time.monotonic() - started < 20:
        time.sleep(0.05)
    assert not busy(), "generation went on after the client left"


@pytest.fixture(scope="module")
def checkpoint(smollm2, tmp_path_factory) -> Path:
    return smollm2.save(tmp_path_factory.mktemp("ckpt") / "student")


def test_a_saved_checkpoint_folder_serves_the_same_answers(checkpoint, answer):
    from orchard_cli.models import resolve_endpoint

    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in checkpoint.iterdir()}
    endpoint = resolve_endpoint(str(checkpoint))
    with endpoint as info:
        assert info.name == "local" and info.model == "student" and info.dialects == ["chat", "responses"]
        got = post(info.base_url, "/chat/completions", {"messages": QUESTION, "max_tokens": 16,
                                                        "return_token_ids": True}).json()
    assert got["choices"][0]["message"]["content"] == answer["choices"][0]["message"]["content"]
    assert got["choices"][0]["token_ids"] == answer["choices"][0]["token_ids"]


def test_orchard_serve_cli_serves_a_checkpoint_and_stops_on_sigterm(checkpoint):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "orchard_cli.main", "serve", "--model", str(checkpoint),
                             "--port", "0", "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        ready = json.loads(line)
        assert ready["model"] == "student" and ready["base_url"].endswith("/v1")
        got = post(ready["base_url"], "/chat/completions", {"messages": QUESTION, "max_tokens": 2}).json()
        assert got["usage"]["completion_tokens"] <= 2 and got["model"] == "student"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    err = proc.stderr.read()
    assert code == 0, err
    assert "vLLM or SGLang" in err


def test_orchard_serve_rejects_a_folder_that_is_not_a_checkpoint(tmp_path):
    from orchard_cli.main import main

    assert main(["serve", "--model", str(tmp_path)]) == 2
    assert main(["serve", "--model", str(tmp_path / "missing")]) == 2


def test_orchard_serve_rejects_a_device_this_torch_does_not_see(checkpoint, capsys):
    from orchard_cli.main import main

    assert main(["serve", "--model", str(checkpoint), "--port", "0", "--device", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "error: cannot put student on 'nosuch'" in err and "--device cpu" in err and "Traceback" not in err
