"""Model endpoints: the registry, the OpenAI-compatible config, and the scripted endpoint itself."""

from __future__ import annotations

import httpx
import pytest

from orchard_cli.errors import AuthError, UnknownNameError, UsageError
from orchard_cli.models import ModelEndpoint, endpoints, load_endpoint, resolve_endpoint
from orchard_cli.models.openai_compat import OpenAIEndpoint
from orchard_cli.models.scripted import ScriptedEndpoint


def test_registry_lists_endpoints_and_names_the_valid_ones():
    assert {"openai", "scripted"} <= set(endpoints.names())
    with pytest.raises(UnknownNameError, match="valid: .*openai.*scripted"):
        load_endpoint("no-such-model")


def test_openai_endpoint_reads_its_key_from_the_named_variable_only(monkeypatch):
    endpoint = resolve_endpoint("http://127.0.0.1:8000", key_env="MY_TEAM_KEY")
    assert isinstance(endpoint, OpenAIEndpoint) and isinstance(endpoint, ModelEndpoint)
    monkeypatch.delenv("MY_TEAM_KEY", raising=False)
    with pytest.raises(AuthError, match="MY_TEAM_KEY"):
        endpoint.start()
    monkeypatch.setenv("MY_TEAM_KEY", "sk-secret-value")
    info = endpoint.start()
    assert info.base_url == "http://127.0.0.1:8000/v1" and info.key_env == "MY_TEAM_KEY"
    assert endpoint.api_key() == "sk-secret-value"
    assert "sk-secret-value" not in info.model_dump_json()  # the info is safe to write down


def test_base_urls_with_a_path_are_kept():
    assert OpenAIEndpoint("https://api.example.com/openai/v1/").info.base_url == "https://api.example.com/openai/v1"
    with pytest.raises(UsageError):
        OpenAIEndpoint("127.0.0.1:8000")


def test_scripted_endpoint_replays_in_order_then_says_it_is_exhausted():
    endpoint = load_endpoint("scripted", replies=["first", {"content": "second"}], model="tiny")
    info = endpoint.start()
    try:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        answers = [httpx.post(f"{info.base_url}/chat/completions", json=body) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 400]
        assert [a.json()["choices"][0]["message"]["content"] for a in answers[:2]] == ["first", "second"]
        assert "exhausted after 2" in answers[2].json()["error"]["message"]
        models = httpx.get(f"{info.base_url}/models").json()
        assert models["data"][0]["id"] == "tiny"
    finally:
        endpoint.stop()


def test_scripted_endpoint_checks_the_key_when_it_has_one(monkeypatch):
    monkeypatch.setenv("SCRIPTED_KEY", "sk-upstream")
    with ScriptedEndpoint(["ok"], key_env="SCRIPTED_KEY") as info:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{info.base_url}/chat/completions", json=body).status_code == 401
        ok = httpx.post(f"{info.base_url}/chat/completions", json=body,
                        headers={"Authorization": "Bearer sk-upstream"})
        assert ok.status_code == 200
