"""Streaming without buffering, concurrency, caps, retries and upstream failures."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from proxy_helpers import CHAT, client, sse_events

from orchard_cli.models.scripted import ScriptedReply


def test_stream_reaches_the_client_before_the_upstream_finishes(scripted, proxy_for):
    slow = ScriptedReply(content="one two three four five six", chunk_delay_s=0.3)  # wide margin under load
    upstream = scripted([slow, slow], dialects=("chat",))
    episode = proxy_for(upstream).open_episode()
    http = client(episode)

    def first_content(path, body, marker):
        with http.stream("POST", path, json=body) as resp:
            first = None
            for chunk in resp.iter_raw():
                if first is None and marker in chunk:
                    first = time.monotonic()
            return first

    chat_first = first_content("/chat/completions", {**CHAT, "stream": True}, b'"content":"one"')
    responses_first = first_content("/responses", {"model": "m", "input": "hi", "stream": True},
                                    b"response.output_text.delta")
    deadline = time.monotonic() + 5  # the upstream stamps done_at just after its last write
    while any(r["done_at"] is None for r in upstream.requests) and time.monotonic() < deadline:
        time.sleep(0.01)
    chat_done, responses_done = (r["done_at"] for r in upstream.requests)
    assert chat_first is not None and chat_first < chat_done
    assert responses_first is not None and responses_first < responses_done
    streamed = episode.records
    assert [r.response is not None for r in streamed] == [True, True]
    assert streamed[0].response["choices"][0]["message"]["content"] == "one two three four five six"


def test_concurrent_episodes_never_mix(scripted, proxy_for):
    upstream = scripted()  # echoes the last user message, forever
    proxy = proxy_for(upstream)
    episodes = [proxy.open_episode(f"ep{i}") for i in range(8)]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            http = client(episodes[i])
            for j in range(5):
                text = f"ep{i}-call{j}"
                body = {"model": "m", "messages": [{"role": "user", "content": text}], "stream": j % 2 == 1}
                with http.stream("POST", "/chat/completions", json=body) as resp:
                    assert resp.status_code == 200
                    resp.read()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for i, episode in enumerate(episodes):
        records = episode.records
        assert [r.seq for r in records] == list(range(5))
        for j, record in enumerate(records):
            assert record.episode == f"ep{i}"
            assert record.request["messages"][0]["content"] == f"ep{i}-call{j}"
            assert record.response["choices"][0]["message"]["content"] == f"echo: ep{i}-call{j}"
            assert record.stream is (j % 2 == 1)


def test_call_cap_refuses_with_an_error_the_harness_sees(scripted, proxy_for):
    upstream = scripted()
    proxy = proxy_for(upstream, max_calls=2)
    capped, free = proxy.open_episode("loops"), proxy.open_episode("other", max_calls=5)
    http = client(capped)

    assert [http.post("/chat/completions", json=CHAT).status_code for _ in range(2)] == [200, 200]
    refused = http.post("/responses", json={"model": "m", "input": "again", "stream": True})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "orchard_episode_capped"
    assert client(free).post("/chat/completions", json=CHAT).status_code == 200
    assert len(upstream.requests) == 3
    summary = capped.close()
    assert summary.capped == "max_calls=2 reached" and summary.calls == 3
    assert capped.records[-1].error.type == "capped" and capped.records[-1].status == 400


def test_token_cap(scripted, proxy_for):
    upstream = scripted()
    episode = proxy_for(upstream).open_episode(max_tokens=5)
    http = client(episode)
    assert http.post("/chat/completions", json=CHAT).status_code == 200  # uses more than 5 tokens
    assert http.post("/chat/completions", json=CHAT).status_code == 400
    assert episode.capped.startswith("max_tokens=5 reached")
    assert episode.tokens_used == episode.records[0].usage.total_tokens > 5


def test_token_cap_counts_streams_without_usage(scripted, proxy_for):
    upstream = scripted()
    episode = proxy_for(upstream).open_episode(max_tokens=20)
    http = client(episode)
    long = {"model": "m", "messages": [{"role": "user", "content": "word " * 40}], "stream": True}
    with http.stream("POST", "/chat/completions", json=long) as resp:  # no include_usage
        resp.read()
    assert episode.records[0].usage is None
    assert http.post("/chat/completions", json=CHAT).status_code == 400
    assert episode.capped.startswith("max_tokens=20")


def test_harness_hanging_up_mid_stream_is_recorded(scripted, proxy_for):
    upstream = scripted([{"content": "a b c d e f g h", "chunk_delay_s": 0.05}, "next"])
    episode = proxy_for(upstream).open_episode()
    with client(episode) as http:
        with http.stream("POST", "/chat/completions", json={**CHAT, "stream": True}) as resp:
            next(resp.iter_raw())  # read one chunk, then hang up
    with client(episode) as http:
        assert http.post("/chat/completions", json=CHAT).json()["choices"][0]["message"]["content"] == "next"
    first, second = episode.records
    assert first.error.type == "client" and "disconnected" in first.error.message
    assert second.error is None


def test_429_and_500_are_retried_with_backoff(scripted, proxy_for):
    upstream = scripted([{"status": 500}, {"status": 429}, "finally"])
    episode = proxy_for(upstream, max_retries=3).open_episode()
    resp = client(episode).post("/chat/completions", json=CHAT)
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == "finally"
    [record] = episode.records
    assert record.attempts == 3 and record.error is None and len(upstream.requests) == 3


def test_persistent_upstream_error_is_relayed_and_recorded(scripted, proxy_for):
    upstream = scripted([{"status": 503}, {"status": 503}, "never reached"])
    episode = proxy_for(upstream, max_retries=1).open_episode()
    resp = client(episode).post("/chat/completions", json=CHAT)
    assert resp.status_code == 503 and resp.json()["error"]["message"] == "scripted error 503"
    [record] = episode.records
    assert record.attempts == 2 and record.status == 503
    assert record.error.type == "upstream" and record.error.status == 503
    assert record.response["error"]["code"] == 503


@pytest.mark.parametrize("path,body", [
    ("/chat/completions", {**CHAT, "stream": True}),
    ("/responses", {"model": "m", "input": "hi", "stream": True}),
])
def test_stream_cut_mid_way_is_an_infra_error_and_reaches_the_client(scripted, proxy_for, path, body):
    upstream = scripted([{"content": "a b c d e f g", "cut_after_chunks": 3}], dialects=("chat",))
    episode = proxy_for(upstream).open_episode()
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with client(episode).stream("POST", path, json=body) as resp:
            for chunk in resp.iter_raw():
                received += chunk
    assert b"[DONE]" not in received and b"response.completed" not in received
    assert sse_events(received)  # the part that did arrive was relayed
    [record] = episode.records
    assert record.error.type == "infra" and "cut mid-way" in record.error.message
    assert record.stream and record.status == 200


def test_upstream_that_never_answers_times_out_as_an_infra_error(scripted, proxy_for):
    upstream = scripted([{"hang": True}])
    episode = proxy_for(upstream, read_timeout_s=0.5).open_episode()
    started = time.monotonic()
    resp = client(episode).post("/chat/completions", json=CHAT)
    assert resp.status_code == 504 and time.monotonic() - started < 10
    [record] = episode.records
    assert record.error.type == "infra" and "timed out" in record.error.message
    assert record.attempts == 1  # a silent upstream is not retried


def test_unreachable_upstream_is_retried_then_an_infra_error(proxy_for):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    episode = proxy_for(f"http://127.0.0.1:{port}/v1", max_retries=2).open_episode()
    resp = client(episode).post("/responses", json={"model": "m", "input": "hi", "stream": True})
    assert resp.status_code == 502
    [record] = episode.records
    assert record.error.type == "infra" and "unreachable after 3 attempts" in record.error.message
    assert record.attempts == 3


def test_a_proxy_restarted_after_a_torn_line_starts_on_a_fresh_one(scripted, proxy_for, tmp_path):
    """kill -9 mid-write leaves a fragment without a newline; the next proxy on the same --out
    cuts it off instead of gluing its first record onto it (which made the file unreadable)."""
    from proxy_helpers import CHAT, client

    from orchard_cli.proxy import read_records

    upstream = scripted(["one", "two"], dialects=("chat",))
    out = tmp_path / "calls.jsonl"
    first = proxy_for(upstream, out=out)
    with client(first.open_episode("a")) as http:
        assert http.post("/chat/completions", json=CHAT).status_code == 200
    first.stop()
    with out.open("ab") as fh:
        fh.write(b'{"schema_version":1,"episode":"a","seq":1,"endpo')  # the torn write
    second = proxy_for(upstream, out=out)
    with client(second.open_episode("b")) as http:
        assert http.post("/chat/completions", json=CHAT).status_code == 200
    second.stop()
    records = read_records(out)
    assert [(r.episode, r.seq) for r in records] == [("a", 0), ("b", 0)]
