"""One episode end to end on the real local backend: the real recording proxy, the scripted model
endpoint, orchard's bash harness running inside the sandbox, a real SWE-bench-format task, and the
patch graded in a fresh sandbox."""

from __future__ import annotations

import time

from orchard_cli.family import RunOptions
import pytest

import distill_world as dw
from orchard_cli.env import connect
from orchard_cli.harnesses.base import HarnessRun
from orchard_cli.rollout import agent as episodes
from orchard_cli.rollout.agent import AgentSolver, EpisodeOptions, Price
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.rollout.rows import trajectory_of
from orchard_cli.trajectory import episode_key
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.proxy import start_proxy
from orchard_cli.tasks.registry import load_suite

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture
def world(tmp_path_factory, monkeypatch):
    w = dw.world(tmp_path_factory)
    monkeypatch.setenv("ORCHARD_HOME", str(w["home"]))
    family, tasks = load_suite(str(w["one"]), repo_mirror=str(w["mirror"]))
    env = connect("local")
    yield {**w, "family": family, "task": tasks[0], "env": env}
    env.close()


def run_one(world, replies, *, harness=None, options=None, tmp_path=None, **proxy_options):
    from orchard_cli.harnesses import load_harness

    harness = harness or load_harness("bash")
    with ScriptedEndpoint(replies, dialects=("chat",)) as info, \
            start_proxy(info.base_url, model="teacher-1", **proxy_options) as proxy:
        solver = AgentSolver(harness, model="teacher-1", proxy=proxy,
                             options=options or EpisodeOptions(timeout_seconds=120))
        task = world["task"]
        episode = Episode(task=task, attempt=1, solver=solver, log_dir=tmp_path / "logs" if tmp_path else None,
                          episode_id=episode_key(task.suite, task.task_id, harness.name, "teacher-1", 1))
        return trajectory_of(run_episode(episode, family=world["family"], env=world["env"], options=RunOptions()))


def test_a_tool_call_that_fixes_the_bug_is_resolved(world, tmp_path):
    t = run_one(world, [dw.FIX, dw.DONE], tmp_path=tmp_path,
                options=EpisodeOptions(timeout_seconds=120, price=Price(input_per_mtok=1, output_per_mtok=2)))
    assert t.outcome.category == "resolved" and t.outcome.resolved, (t.errors, t.outcome)
    assert t.outcome.details["FAIL_TO_PASS"]["success"] == ["test_add (tests.test_calc.CalcTests)"]
    assert "+    return a + b" in t.patch and t.patch.count("return a + b") == 1
    # Both model calls, as the proxy saw them, in order; the model name the proxy sent upstream.
    assert [c.seq for c in t.calls] == [0, 1] and all(c.status == 200 for c in t.calls)
    assert t.calls[0].upstream_request["model"] == "teacher-1"
    # The conversation, normalised to chat: system, user (the prompt), the tool call, its output,
    # and the final answer.
    roles = [m["role"] for m in t.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"], roles
    assert "add() subtracts instead of adding" in t.messages[1]["content"]
    call = t.messages[2]["tool_calls"][0]
    assert call["function"]["name"] == "bash" and dw.FIX_COMMAND in call["function"]["arguments"]
    assert t.messages[3]["tool_call_id"] == call["id"] and "calc/__init__.py" in t.messages[3]["content"]
    assert t.messages[4] == {"role": "assistant", "content": "add() now adds."}
    assert [tool["function"]["name"] for tool in t.tools] == ["bash"]
    assert t.tokens_in == sum(c.usage.input_tokens for c in t.calls) > 0 and t.tokens_out > 0
    assert t.cost_usd == pytest.approx((t.tokens_in * 1 + t.tokens_out * 2) / 1e6)
    assert t.harness == "bash" and t.harness_version and t.harness_exit_code == 0 and t.errors == []
    assert t.metadata["proxy"]["calls"] == 2 and t.metadata["repo"] == "acme/calc"
    assert (tmp_path / "logs" / "patch.diff").read_text() == t.patch
    assert "test_add" in (tmp_path / "logs" / "test_output.txt").read_text()


def test_a_model_that_does_nothing_leaves_an_empty_patch(world):
    t = run_one(world, [dw.NOTHING])
    assert t.outcome.category == "empty_patch" and not t.outcome.resolved
    assert t.patch == "" and len(t.calls) == 1 and t.cost_usd is None  # no price: unknown, not 0
    assert t.messages[-1] == {"role": "assistant", "content": "I will not change anything."}


def test_an_upstream_that_fails_is_an_infra_error_not_unresolved(world):
    t = run_one(world, [dw.FAIL] * 6, max_retries=0, retry_backoff_s=0.01)
    assert t.outcome.category == "infra_error" and not t.outcome.resolved
    assert "failed upstream" in t.outcome.details["error"]
    assert all(c.error is not None and c.error.status == 500 for c in t.calls) and t.calls
    assert any("500" in e or "failed" in e for e in t.errors)


def test_a_capped_episode_says_so(world):
    looping = {"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}
    t = run_one(world, [looping] * 5, options=EpisodeOptions(timeout_seconds=120, max_calls=2))
    assert any(e.startswith("capped: max_calls=2") for e in t.errors), t.errors
    assert t.metadata["proxy"]["capped"] and t.outcome.category == "empty_patch"
    assert [c.status for c in t.calls] == [200, 200, 400]


def test_an_agent_that_loops_large_calls_is_capped_with_its_records_bounded(world):
    """Each model answer a 100 KB tool call, the conversation growing with each: past the episode's
    records ceiling (1 MiB here, ProxyConfig.max_record_bytes) the call that passes it is kept
    without its bodies, the episode is capped, and the trajectory stays small."""
    large = {"tool_calls": [{"name": "bash", "arguments": {"command": "true " + "x" * 100_000}}]}
    t = run_one(world, [large] * 20, options=EpisodeOptions(timeout_seconds=120, max_calls=20),
                max_record_bytes=1 << 20)
    assert any(e.startswith("capped: records ceiling") for e in t.errors), t.errors
    assert t.outcome.category == "empty_patch" and t.metadata["proxy"]["capped"]
    cut = [c for c in t.calls if c.error is not None and c.error.type == "capped" and c.status == 200]
    assert len(cut) == 1 and cut[0].response is None and str(cut[0].request).startswith("[orchard: not kept")
    assert t.calls[-1].status == 400 and len(t.calls) < 20
    assert len(t.model_dump_json()) < 3 << 20


class SleepingHarness:
    """A harness whose program hangs in the sandbox (it honours its time limit)."""

    name = "sleeper"

    def check(self):
        return []

    def version(self):
        return "1"

    def mounts(self):
        return []

    def run(self, sandbox, context):
        job = sandbox.exec("echo 'half a fix' > calc/NOTES.txt && sleep 600", timeout=context.timeout_seconds)
        return HarnessRun(exit_code=job.exit_code, timed_out=job.timed_out,
                          error="killed at its time limit" if job.timed_out else None)


class StuckHarness(SleepingHarness):
    """A harness adapter that never returns at all (the episode's watchdog must end it)."""

    name = "stuck"

    def run(self, sandbox, context):
        time.sleep(3600)


def test_a_harness_that_hangs_is_a_timeout(world):
    started = time.monotonic()
    t = run_one(world, [dw.NOTHING], harness=SleepingHarness(), options=EpisodeOptions(timeout_seconds=3))
    assert t.outcome.category == "timeout" and not t.outcome.resolved
    assert "calc/NOTES.txt" in t.patch  # what it left is kept (and graded: it does not resolve)
    assert time.monotonic() - started < 60


def test_a_harness_that_never_returns_is_stopped_by_the_watchdog(world, monkeypatch):
    monkeypatch.setattr(episodes, "HARNESS_GRACE_SECONDS", 1.0)
    started = time.monotonic()
    t = run_one(world, [dw.NOTHING], harness=StuckHarness(), options=EpisodeOptions(timeout_seconds=1))
    assert t.outcome.category == "timeout" and "did not return within 1 s" in " ".join(t.errors)
    assert time.monotonic() - started < 60


def test_the_harness_sees_only_the_proxy_and_its_episode_token(world):
    seen = {}

    class Inspector(SleepingHarness):
        name = "inspector"

        def run(self, sandbox, context):
            seen["context"] = context
            job = sandbox.exec(["python3", "-c", (
                "import json, os, sys, urllib.request\n"
                f"r = urllib.request.Request({context.base_url!r} + '/chat/completions', data=json.dumps("
                "{'model': 'x', 'messages': [{'role': 'user', 'content': 'hi'}]}).encode(), headers={"
                f"'Authorization': 'Bearer {context.api_key}', 'Content-Type': 'application/json'}})\n"
                "print(json.load(urllib.request.urlopen(r))['choices'][0]['message']['content'])\n"
                "try:\n    urllib.request.urlopen('http://1.1.1.1', timeout=3)\nexcept Exception as e:\n"
                "    print('blocked', type(e).__name__)\n")], timeout=60)
            seen["out"] = job.stdout + job.stderr
            return HarnessRun(exit_code=job.exit_code)

    t = run_one(world, [dw.NOTHING], harness=Inspector())
    context = seen["context"]
    assert context.base_url.startswith("http://127.0.0.1:") and context.base_url.endswith("/v1")
    assert "/e/" in context.base_url and context.api_key.startswith("orch-ep-")
    assert "I will not change anything." in seen["out"] and "blocked" in seen["out"]
    assert len(t.calls) == 1 and t.outcome.category == "empty_patch"
    assert "add() subtracts instead of adding" in context.prompt and "/testbed" in context.prompt
