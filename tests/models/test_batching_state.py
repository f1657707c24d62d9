"""The batch's state on the real SmolLM2: weight swaps at a token boundary, a prefix cache per
conversation, back-pressure (429 + Retry-After) through the server."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from batch_helpers import first_divergence_gap, unbatched

pytestmark = pytest.mark.model


def chat(model: Any, text: str, history: list[dict[str, str]] | None = None) -> list[int]:
    return model.encode_chat([*(history or []), {"role": "user", "content": text}])


def test_a_weight_swap_lets_running_requests_finish_and_holds_new_ones(batched):
    engine, before = batched.engine, batched.weight_version
    long = chat(batched, "Write a long story about a dragon.")
    with unbatched(batched):
        batched.forget()
        alone = [s.token_id for s in batched.steps(long, max_tokens=12)]
    first = engine.submit(long, max_tokens=12)
    stream = engine.stream(first)
    got = [next(stream).token_id]  # it runs
    swapped = threading.Thread(target=batched.load_weights_from, args=(batched.model,), kwargs={"version": "swap-1"})
    swapped.start()
    deadline = time.monotonic() + 30
    while not engine._tasks and time.monotonic() < deadline:  # the swap is waiting for the boundary
        time.sleep(0.01)
    later = engine.submit(chat(batched, "Write a long story about a knight."), max_tokens=2)
    got += [s.token_id for s in stream]
    swapped.join(60)
    list(engine.stream(later))
    try:
        assert got == alone[:len(got)] and len(got) == len(alone)  # not disturbed: the old weights throughout
        assert first.info["weight_version"] == before and later.info["weight_version"] == "swap-1"
        # the cache the old weights computed was dropped: the chat template's shared start is computed again
        assert later.info["reused"] == 0
    finally:
        batched.weight_version = before


def test_interleaved_conversations_each_go_on_from_their_own_cache(batched):
    engine = batched.engine
    batched.forget()
    turns = {k: chat(batched, q) for k, q in {"a": "What is the capital of France?", "b": "Name a fruit."}.items()}
    with engine.together():
        requests = {k: engine.submit(ids, max_tokens=6) for k, ids in turns.items()}
    replies = {k: [s.token_id for s in engine.stream(r)] for k, r in requests.items()}
    questions = {"a": "What is the capital of France?", "b": "Name a fruit."}
    follow = {k: chat(batched, "And why?", [{"role": "user", "content": questions[k]},
                                            {"role": "assistant", "content": batched.decode(replies[k])}])
              for k in turns}
    # a third conversation in between must not push the others out (one slot would have)
    list(engine.stream(engine.submit(chat(batched, "Say hello."), max_tokens=4)))
    with engine.together():
        again = {k: engine.submit(ids, max_tokens=6) for k, ids in follow.items()}
    answers = {k: [s.token_id for s in engine.stream(r)] for k, r in again.items()}
    for k in turns:
        # only the new turn was processed: the first prompt and the reply (but its last token, never fed)
        assert again[k].info["reused"] >= len(turns[k]) + len(replies[k]) - 1, (k, again[k].info["reused"])
        with unbatched(batched):
            batched.forget()
            fresh = [s.token_id for s in batched.steps(follow[k], max_tokens=6)]
        n, gap = first_divergence_gap(batched, follow[k], answers[k], fresh)
        assert n < 0 or abs(gap) < 1e-4, (k, n, gap)


def test_the_prefix_cache_is_bounded_least_recently_used_first(batched):
    from orchard_cli.models.prefix_cache import PrefixCache

    runner = batched.engine.runner
    cache = PrefixCache(capacity=100)

    def slot(ids: list[int]) -> Any:
        made = runner.slot(len(ids))
        made.length, made.ids = len(ids), list(ids)
        return made

    cache.put(slot([1] * 40))
    cache.put(slot([2] * 40))
    cache.put(slot([1] * 40 + [3] * 10))  # extends the first: it replaces it
    assert cache.tokens == 90 and len(cache.entries) == 2
    copied, n = cache.take([2] * 30 + [9])  # a shared part is copied, the entry stays
    assert n == 30 and copied.length == 30 and cache.tokens == 90
    cache.put(slot([4] * 60))  # past 100 tokens: the least recently used entry ([1]*40+[3]*10) goes
    assert cache.tokens == 100 and cache.take([1] * 41) == (None, 0)
    taken, n = cache.take([4] * 60 + [5])  # a prompt extending a whole entry takes it
    assert n == 60 and taken.length == 60 and cache.tokens == 40


def test_a_full_queue_is_a_429_with_retry_after_and_a_freed_place_is_taken(smollm2, batched):
    from orchard_cli.models.local_server import LocalEndpoint

    limits = batched.engine.limits
    endpoint = LocalEndpoint(model=batched, max_batch=2, max_queue=0)
    body = {"messages": [{"role": "user", "content": "Write a long story."}], "temperature": 2.0, "seed": 3,
            "max_tokens": 400, "stream": True}
    try:
        with endpoint as info, httpx.Client(timeout=300) as client:
            streams = [client.stream("POST", f"{info.base_url}/chat/completions", json=body) for _ in range(2)]
            # the line iterators are kept: one collected closes its connection (the client leaves)
            readers = [s.__enter__().iter_lines() for s in streams]
            for lines in readers:  # both are generating
                while '"content":"' not in next(lines).replace('"content":""', ""):
                    pass
            assert client.get(f"{info.base_url.removesuffix('/v1')}/health").json()["batch"]["running"] == 2
            full = client.post(f"{info.base_url}/chat/completions", json={**body, "stream": False, "max_tokens": 2})
            assert full.status_code == 429 and int(full.headers["Retry-After"]) >= 1
            assert full.json()["error"]["type"] == "rate_limit_exceeded"
            for s in streams:  # the clients go away: their places are freed
                s.__exit__(None, None, None)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                state = client.get(f"{info.base_url.removesuffix('/v1')}/health").json()["batch"]
                if state["running"] == 0:
                    break
                time.sleep(0.05)
            assert state["running"] == 0 and state["max_batch"] == 2
            ok = client.post(f"{info.base_url}/chat/completions", json={**body, "stream": False, "max_tokens": 2})
            assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2
    finally:
        batched.enable_batching(limits)


def test_a_failed_forward_pass_fails_its_requests_and_the_batch_goes_on(batched):
    from orchard_cli.models.batching import Engine, Limits

    class FailsOnce:  # the real packed forward, but its second pass raises (out of memory, say)
        def __init__(self, runner: Any) -> None:
            self.runner, self.calls = runner, 0

        def slot(self, capacity: int) -> Any:
            return self.runner.slot(capacity)

        def forward(self, feeds: Any, want: Any) -> Any:
            self.calls += 1
            if self.calls == 2:
                raise RuntimeError("simulated: out of memory")
            return self.runner.forward(feeds, want)

    engine = Engine(batched, FailsOnce(batched.engine.runner), Limits(max_batch=2))
    try:
        ids = chat(batched, "Name a fruit.")
        with engine.together():
            doomed = [engine.submit(ids, max_tokens=4) for _ in range(2)]
        for request in doomed:
            with pytest.raises(RuntimeError, match="simulated"):
                list(engine.stream(request))
        after = [s.token_id for s in engine.stream(engine.submit(ids, max_tokens=4))]
        with unbatched(batched):
            batched.forget()
            assert after == [s.token_id for s in batched.steps(ids, max_tokens=4)]
        assert engine.load()["running"] == 0
    finally:
        engine.close()
