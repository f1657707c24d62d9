"""The real Codex CLI (installed by scripts/install-harnesses.sh) in a local sandbox, through the
real recording proxy, against scripted Responses streams."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Iterator

import pytest

from orchard_cli.harnesses import load_harness
from orchard_cli.harnesses.codex import SILENT_NOOP
from orchard_cli.models.scripted import ScriptedReply
from orchard_cli.models.scripted_app import Turn
from orchard_cli.proxy.translate import ResponsesStream, responses_to_chat

pytestmark = [pytest.mark.harness, pytest.mark.bwrap]

EDIT = {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo changed > hello.txt"}}]}


def test_codex_runs_a_command_that_changes_the_workspace(rig, installed_harnesses):
    rig.start([EDIT, "Done: hello.txt now says changed."])
    harness = load_harness("codex")
    assert harness.check() == [] and harness.version() == "0.171.0"
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, rig.context(sandbox))
    assert run.exit_code == 0 and not run.timed_out and run.error is None, run
    assert sandbox.read_file(f"{sandbox.workdir}/hello.txt") == b"changed\n"
    assert rig.changed(sandbox) == ["hello.txt"]          # CODEX_HOME stays out of the repo
    assert run.info["tool_calls"] == "1" and run.info["last_message"] == "Done: hello.txt now says changed."
    records = rig.episode.records
    assert len(records) == rig.endpoint.served == 2
    assert all(r.endpoint == "responses" and r.stream and r.status == 200 for r in records)
    tools = {t.get("name") for t in records[0].request["tools"]}
    assert "exec_command" in tools and "web_search" not in tools
    call = next(i for i in records[0].response["output"] if i["type"] == "function_call")
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {"cmd": "echo changed > hello.txt"}
    result = next(i for i in records[1].request["input"] if i.get("type") == "function_call_output")
    assert result["call_id"] == call["call_id"] and "exited with code 0" in result["output"]
    message = next(i for i in records[1].response["output"] if i["type"] == "message")
    assert message["content"][0]["text"] == "Done: hello.txt now says changed."


def test_codex_takes_a_prompt_too_long_for_argv_through_stdin(rig, installed_harnesses):
    rig.start(["Nothing to do."])
    harness = load_harness("codex")
    sandbox = rig.sandbox(harness)
    prompt = "Read this log.\n" + "x" * 200_000 + "\nEND-OF-PROMPT"   # one argv string may hold 128 KiB
    run = harness.run(sandbox, rig.context(sandbox, prompt=prompt))
    assert run.exit_code == 0 and run.error is None, run
    (record,) = rig.episode.records
    user = [i for i in record.request["input"] if i.get("role") == "user"]
    assert any(prompt in part.get("text", "") for item in user for part in item["content"])


def test_codex_hanging_on_its_model_is_killed_at_the_time_limit(rig, installed_harnesses):
    rig.start([{"content": "never sent", "hang": True}])
    harness = load_harness("codex")
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, rig.context(sandbox, timeout_seconds=6))
    assert run.timed_out and run.exit_code == 124 and "time limit" in (run.error or ""), run  # the published job words
    assert 5.5 < run.duration_seconds < 20
    left = sandbox.exec(r"pgrep -f 'codex(\.js)? exec'", timeout=30)   # node's and the native binary's
    assert left.exit_code == 1, left.stdout                              # nothing of it is left running


class _Upstream(http.server.BaseHTTPRequestHandler):
    """Responses streams for a tool call, optionally without `response.output_item.done` events."""

    disable_nagle_algorithm = True
    drop_item_done = True
    replies = [ScriptedReply.model_validate(EDIT), ScriptedReply(content="Done.")]
    served = 0

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        reply = cls.replies[min(cls.served, len(cls.replies) - 1)]
        cls.served += 1
        stream = ResponsesStream(body)
        events = stream.start()
        for chunk in Turn(reply, responses_to_chat(body), body.get("model") or "m").chunks():
            events += stream.feed(chunk)
        events += stream.finish()
        if self.drop_item_done:
            events = [e for e in events if b"response.output_item.done" not in e.split(b"\n", 1)[0]]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(sum(map(len, events))))
        self.end_headers()
        self.wfile.write(b"".join(events))

    def log_message(self, *args):
        pass


@pytest.fixture()
def responses_upstream() -> Iterator[type[_Upstream]]:
    handler = type("Upstream", (_Upstream,), {"served": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("drop_item_done", [True, False], ids=["without-item-done", "with-item-done"])
def test_codex_silent_noop_without_output_item_done_is_reported(rig, installed_harnesses, responses_upstream,
                                                                 drop_item_done):
    responses_upstream.drop_item_done = drop_item_done
    rig.start(upstream=responses_upstream.url)
    harness = load_harness("codex")
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, rig.context(sandbox, timeout_seconds=60))
    assert run.exit_code == 0 and not run.timed_out, run
    changed = sandbox.read_file(f"{sandbox.workdir}/hello.txt")
    if drop_item_done:   # Codex "succeeds" having done nothing: orchard says so
        assert changed == b"hello\n" and rig.changed(sandbox) == []
        assert run.error == SILENT_NOOP and run.info["silent_noop"] == "true" and run.info["tool_calls"] == "0"
        assert len(rig.episode.records) == 1   # the model was asked once and answered a tool call
    else:                # the same stream with the events: the command runs (the check can fail)
        assert changed == b"changed\n" and run.error is None and run.info["tool_calls"] == "1"
