"""orchard's bash agent, run in a real local sandbox through the real recording proxy against the
scripted endpoint: native tool calls, the fenced-block fallback, malformed calls, a hang."""

from __future__ import annotations

import json

import pytest

from orchard_cli.harnesses import load_harness
from orchard_cli.harnesses.bash_agent_main import parse_text, parse_tool_call

pytestmark = pytest.mark.bwrap


def _call(name: str, arguments: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_parse_tool_calls_and_fenced_blocks():
    assert parse_tool_call(_call("bash", '{"command": "ls"}')) == ("ls", None)
    assert "not valid JSON" in parse_tool_call(_call("bash", '{"command": "ls"'))[1]
    assert "unknown tool" in parse_tool_call(_call("exec", '{"command": "ls"}'))[1]
    assert "non-empty string" in parse_tool_call(_call("bash", '{"cmd": "ls"}'))[1]
    assert parse_text("Let me look.\n```bash\nls -la\n```\n") == ("ls -la\n", None)
    assert parse_text("```sh\necho hi\n```") == ("echo hi\n", None)
    assert parse_text("All done: the file is fixed.") == (None, None)
    assert "2 bash blocks" in parse_text("```bash\nls\n```\n```bash\npwd\n```")[1]
    assert "never closed" in parse_text("```bash\nls -la")[1]


def test_native_tool_calls_change_the_workspace(rig):
    rig.start([{"tool_calls": [{"name": "bash", "arguments": {"command": "echo changed > hello.txt"}}]},
               "The file now says changed."])
    harness = load_harness("bash")
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, rig.context(sandbox))
    assert run.exit_code == 0 and run.error is None, run
    assert sandbox.read_file(f"{sandbox.workdir}/hello.txt") == b"changed\n"
    assert rig.changed(sandbox) == ["hello.txt"]          # the agent's files stay out of the repo
    assert run.info["finish"] == "done" and run.info["tool_calls"] == "1"
    records = rig.episode.records
    assert len(records) == rig.endpoint.served == 2
    first, second = records
    assert first.endpoint == "chat" and first.status == 200
    assert first.request["tools"][0]["function"]["name"] == "bash"
    call = first.response["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"command": "echo changed > hello.txt"}
    tool_result = second.request["messages"][-1]
    assert tool_result["role"] == "tool" and tool_result["tool_call_id"] == call["id"]
    assert "[exit code 0]" in tool_result["content"]
    assert second.response["choices"][0]["message"]["content"] == "The file now says changed."


def test_fenced_block_fallback_and_malformed_calls(rig):
    rig.start([
        {"tool_calls": [{"name": "bash", "arguments": '{"command": "echo broken'}]},  # bad JSON
        "I will run two:\n```bash\nls\n```\n```bash\npwd\n```",                        # two blocks
        "Now the edit:\n```bash\nprintf 'changed\\n' > hello.txt && cat hello.txt\n```",
        "Done.",
    ])
    harness = load_harness("bash")
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, rig.context(sandbox))
    assert run.exit_code == 0 and run.error is None, run
    assert sandbox.read_file(f"{sandbox.workdir}/hello.txt") == b"changed\n"
    assert run.info["fenced_blocks"] == "1" and run.info["format_errors"] == "2"
    records = rig.episode.records
    assert len(records) == 4
    assert records[1].request["messages"][-1]["content"].startswith("error: the arguments are not valid JSON")
    assert "2 bash blocks" in records[2].request["messages"][-1]["content"]
    last = records[3].request["messages"][-1]
    assert last["role"] == "user" and "Output of your command" in last["content"] and "changed" in last["content"]


def test_max_turns_and_a_capped_episode(rig):
    rig.start([{"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}], cycle=True, max_calls=3)
    harness = load_harness("bash")
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, rig.context(sandbox, max_turns=2))
    assert run.exit_code == 0 and run.info["finish"] == "max_turns" and run.info["turns"] == "2", run
    run = harness.run(sandbox, rig.context(sandbox, max_turns=10))   # calls 3.. hit the cap of 3
    assert run.exit_code == 2 and run.error and "capped" in run.error, run


def test_a_hanging_model_is_killed_at_the_time_limit(rig):
    rig.start([{"content": "never sent", "hang": True}])
    harness = load_harness("bash")
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, rig.context(sandbox, timeout_seconds=3))
    assert run.timed_out and run.exit_code == 124, run  # a timeout is exit 124, as the published API says
    assert 2.5 < run.duration_seconds < 15
    assert "time limit" in (run.error or "")
