"""Chat completions through the real proxy: records for plain and streamed calls, routing, files."""

from __future__ import annotations

import json

from proxy_helpers import CHAT, client, sse_events

from orchard_cli.proxy import CallRecord, read_records


def test_chat_non_stream_is_forwarded_and_recorded(scripted, proxy_for, tmp_path):
    upstream = scripted(["hello there friend"], dialects=("chat",))
    out = tmp_path / "calls.jsonl"
    proxy = proxy_for(upstream, out=out)
    episode = proxy.open_episode("task-1")

    resp = client(episode).post("/chat/completions", json=CHAT)

    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "hello there friend"
    [record] = episode.records
    assert record.schema_version == 2 and record.weight_version is None  # the upstream named no weights
    assert (record.episode, record.seq, record.endpoint, record.upstream_endpoint) == ("task-1", 0, "chat", "chat")
    assert record.stream is False and record.status == 200 and record.error is None
    assert record.request == CHAT
    assert record.response == resp.json()
    assert record.usage.output_tokens == 3 and record.usage.total_tokens == record.usage.input_tokens + 3
    assert record.attempts == 1
    assert 0 <= record.timing.first_byte_ms <= record.timing.ended_ms
    assert upstream.requests[0]["body"] == CHAT  # forwarded unchanged
    proxy.stop()
    [on_disk] = read_records(out)
    assert on_disk == record


def test_chat_stream_is_relayed_and_assembled(scripted, proxy_for):
    upstream = scripted([{"content": "one two three", "tool_calls": [
        {"name": "exec", "arguments": {"command": "ls -la /tmp"}}]}])
    proxy = proxy_for(upstream)
    episode = proxy.open_episode()

    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    with client(episode).stream("POST", "/chat/completions", json=body) as resp:
        raw = resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
    assert raw.endswith(b"data: [DONE]\n\n")
    chunks = sse_events(raw)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "one two three"

    [record] = episode.records
    assert record.stream is True
    message = record.response["choices"][0]["message"]
    assert message["content"] == "one two three"
    [call] = message["tool_calls"]
    assert call["function"]["name"] == "exec"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls -la /tmp"}
    assert record.response["choices"][0]["finish_reason"] == "tool_calls"
    assert record.usage is not None and record.usage.output_tokens > 0
    assert record.timing.first_byte_ms is not None


def test_logprobs_and_token_ids_are_recorded_when_the_upstream_returns_them(scripted, proxy_for):
    upstream = scripted(["alpha beta", "gamma delta"])
    proxy = proxy_for(upstream, extra_body={"logprobs": True, "return_token_ids": True})
    episode = proxy.open_episode()
    http = client(episode)

    http.post("/chat/completions", json=CHAT)
    with http.stream("POST", "/chat/completions", json={**CHAT, "stream": True}) as resp:
        resp.read()

    for record in episode.records:
        assert record.upstream_request["logprobs"] is True  # injected by extra_body
        assert len(record.completion_token_ids) == 2
        assert len(record.logprobs) == 2 and all(lp < 0 for lp in record.logprobs)
        assert record.prompt_token_ids
    plain, streamed = episode.records
    assert streamed.stream and not plain.stream


def test_model_override_and_models_route(scripted, proxy_for):
    upstream = scripted(["ok"], model="real-model")
    proxy = proxy_for(upstream, model="real-model")
    episode = proxy.open_episode()
    http = client(episode)

    assert http.get("/models").json()["data"][0]["id"] == "real-model"
    http.post("/chat/completions", json={**CHAT, "model": "alias"})
    assert upstream.requests[0]["body"]["model"] == "real-model"
    [record] = episode.records
    assert record.request["model"] == "alias" and record.upstream_request["model"] == "real-model"


def test_bearer_token_routes_on_plain_v1_and_closed_tokens_are_refused(scripted, proxy_for):
    upstream = scripted(["a", "b"])
    proxy = proxy_for(upstream)
    episode = proxy.open_episode("by-bearer")
    import httpx

    plain = httpx.Client(base_url=proxy.base_url, headers={"Authorization": f"Bearer {episode.api_key}"})
    assert plain.post("/chat/completions", json=CHAT).status_code == 200
    assert episode.records[0].episode == "by-bearer"

    unknown = httpx.Client(base_url=proxy.base_url, headers={"Authorization": "Bearer nope"})
    assert unknown.post("/chat/completions", json=CHAT).status_code == 401

    summary = episode.close()
    assert summary.calls == 1 and summary.capped is None
    assert plain.post("/chat/completions", json=CHAT).status_code == 401
    assert client(episode).post("/chat/completions", json=CHAT).status_code == 401
    assert len(upstream.requests) == 1  # refused calls never reach the upstream


def test_episode_urls_use_the_advertised_root(scripted, proxy_for):
    proxy = proxy_for(scripted(), advertise_url="http://172.17.0.1:8787/")
    episode = proxy.open_episode("in-docker")
    assert episode.base_url == f"http://172.17.0.1:8787/e/{episode.token}/v1"
    assert episode.env() == {"OPENAI_API_KEY": episode.token, "OPENAI_BASE_URL": episode.base_url}
    assert proxy.url.startswith("http://127.0.0.1:")  # still bound to loopback


def test_records_validate_from_their_own_json(scripted, proxy_for):
    proxy = proxy_for(scripted(["x"]))
    episode = proxy.open_episode()
    client(episode).post("/chat/completions", json=CHAT)
    [record] = episode.records
    assert CallRecord.model_validate_json(record.model_dump_json()) == record


def test_a_torn_last_line_is_skipped_and_a_bad_middle_line_is_an_error(scripted, proxy_for, tmp_path):
    import pytest

    from orchard_cli.errors import UsageError

    out = tmp_path / "calls.jsonl"
    proxy = proxy_for(scripted(), out=out)
    episode = proxy.open_episode()
    for _ in range(2):
        client(episode).post("/chat/completions", json=CHAT)
    proxy.stop()
    good = out.read_bytes()
    out.write_bytes(good + good.splitlines(keepends=True)[0][:40])  # a crash mid-line
    assert len(read_records(out)) == 2
    out.write_bytes(b'{"schema_version": 1}\n' + good)
    with pytest.raises(UsageError, match=":1: not a call record"):
        read_records(out)


def test_a_schema_1_call_record_still_reads(scripted, proxy_for, tmp_path):
    """Files written before `weight_version` (schema 1) read as they are: the field is None."""
    upstream = scripted(["old times"], dialects=("chat",))
    proxy = proxy_for(upstream)
    episode = proxy.open_episode()
    client(episode).post("/chat/completions", json=CHAT)
    [record] = episode.records
    old = record.model_dump(mode="json", exclude={"weight_version"})
    old["schema_version"] = 1
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    [read] = read_records(path)
    assert read.schema_version == 1 and read.weight_version is None and read.response == record.response
