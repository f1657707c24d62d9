"""`weight_version`: the served model names the weights that answered, and the recording proxy keeps
it on the call record (chat streamed or not, and Responses translated to chat upstream)."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.model

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def test_answers_name_the_weight_version_and_the_proxy_records_it(smollm2, smollm2_url, tmp_path):
    from orchard_cli.proxy import read_records, start_proxy

    before = smollm2.weight_version
    smollm2.load_weights_from(smollm2.model, version="v7")  # the same weights, now with a version
    try:
        direct = httpx.post(f"{smollm2_url}/chat/completions", json={"messages": QUESTION, "max_tokens": 2},
                            timeout=300).json()
        assert direct["weight_version"] == "v7"
        with start_proxy(smollm2_url, out=tmp_path / "calls.jsonl",
                         extra_body={"return_token_ids": True, "logprobs": True}) as proxy:
            episode = proxy.open_episode()
            http = httpx.Client(base_url=episode.base_url, timeout=300,
                                headers={"Authorization": f"Bearer {episode.api_key}"})
            http.post("/chat/completions", json={"messages": QUESTION, "max_tokens": 2})
            with http.stream("POST", "/chat/completions",
                             json={"messages": QUESTION, "max_tokens": 2, "stream": True}) as resp:
                resp.read()
            http.post("/responses", json={"input": "What is 2+2?", "max_output_tokens": 2})
            records = episode.records
        assert [r.weight_version for r in records] == ["v7", "v7", "v7"]
        assert all(r.schema_version == 2 and r.completion_token_ids for r in records)
        assert [r.weight_version for r in read_records(tmp_path / "calls.jsonl")] == ["v7", "v7", "v7"]
    finally:
        smollm2.weight_version = before
