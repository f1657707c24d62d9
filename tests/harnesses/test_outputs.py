"""How the adapters read their harness's own output (no binary needed): Codex's `--json` events
and OpenClaw's JSON result, as the real programs print them."""

from __future__ import annotations

import json

from orchard_cli.harnesses.base import HarnessContext, HarnessRun
from orchard_cli.harnesses.codex import SILENT_NOOP, Codex, inspect_events
from orchard_cli.harnesses.openclaw import inspect_result


def _events(*events: dict) -> str:
    return "\n".join(json.dumps(e) for e in events) + "\n"


STARTED = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
           {"type": "item.completed", "item": {"id": "i0", "type": "error", "message": "Model metadata not found"}}]


def test_codex_events_a_good_turn():
    run = HarnessRun(exit_code=0)
    inspect_events(run, _events(
        *STARTED,
        {"type": "error", "message": "Reconnecting... 1/5"},    # a retry that then succeeded
        {"type": "item.completed", "item": {"id": "i1", "type": "command_execution", "exit_code": 0}},
        {"type": "item.completed", "item": {"id": "i2", "type": "agent_message", "text": "fixed"}},
        {"type": "turn.completed", "usage": {}}))
    assert run.error is None
    assert run.info == {"tool_calls": "1", "messages": "1", "turns": "1", "last_message": "fixed"}


def test_codex_events_a_failed_turn_and_a_silent_noop():
    run = HarnessRun(exit_code=1)
    inspect_events(run, _events(*STARTED, {"type": "error", "message": "boom"},
                                {"type": "turn.failed", "error": {"message": "HTTP 400: bad"}}))
    assert run.error == "codex: HTTP 400: bad"
    run = HarnessRun(exit_code=0)
    inspect_events(run, _events(*STARTED, {"type": "turn.completed", "usage": {}}))
    assert run.error == SILENT_NOOP and run.info["silent_noop"] == "true"


def test_codex_command_line():
    context = HarnessContext(prompt="-fix it", model="m", base_url='http://127.0.0.1:9/e/"t"/v1', api_key="k")
    argv = Codex().argv(context, "/workspace")
    assert argv[2] == "exec" and argv[-2:] == ["--", "-fix it"]
    for flag in ("--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--ephemeral", "--json"):
        assert flag in argv
    assert argv[argv.index("-C") + 1] == "/workspace" and argv[argv.index("-m") + 1] == "m"
    provider = next(a for a in argv if a.startswith("model_providers.orchard="))
    assert 'base_url="http://127.0.0.1:9/e/\\"t\\"/v1"' in provider and 'wire_api="responses"' in provider
    assert 'env_key="ORCHARD_API_KEY"' in provider and 'web_search="disabled"' in argv
    assert ["--disable", "multi_agent"] == argv[argv.index("multi_agent") - 1:argv.index("multi_agent") + 1]


def test_openclaw_result():
    run = HarnessRun(exit_code=0)
    inspect_result(run, json.dumps({"ok": True, "status": "ok", "final": "done", "assistantTurns": 2,
                                    "toolSummary": {"calls": 1}}, indent=2))
    assert run.error is None and run.info == {"status": "ok", "tool_calls": "1", "turns": "2",
                                              "last_message": "done"}
    run = HarnessRun(exit_code=1)
    inspect_result(run, "warming up\n" + json.dumps({"ok": False, "status": "error", "error": {
        "message": "Invalid config", "kind": "exception"}}, indent=2))
    assert run.error == "openclaw: Invalid config"
    run = HarnessRun(exit_code=1)
    inspect_result(run, "")
    assert run.error and "no result" in run.error
