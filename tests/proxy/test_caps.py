"""What an agent sends is capped where it enters, so no agent can fill the disk: one tool call's
arguments (the same limit in the gateway, the ToolSession, task_tool.py and the MCP server), one
model call's request (the proxy's cap, refused unread), an episode's dispatch log and its model-call
records (a ceiling, the cut marked in the record). A 200 the upstream sends that is not JSON is
recorded as the infra error it is."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy_helpers import CHAT, client

from orchard_cli.tools import ToolSession, ToolSpec
from orchard_cli.tools.spec import ARGUMENTS_LIMIT, HOST_TOOLS_DIR
from orchard_cli.tools.spec import ToolReply

ROOT = Path(__file__).resolve().parents[2]
SPEC = ToolSpec(name="save", description="save a text", service="notes", action="save",
                input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


class Notes:
    def __init__(self) -> None:
        self.saved = 0

    def call(self, service: str, action: str, arguments: dict[str, Any]) -> ToolReply:
        self.saved += 1
        return ToolReply(result={"saved": len(arguments["text"])})


def _chunks(data: bytes, size: int = 1 << 16):
    for start in range(0, len(data), size):
        yield data[start:start + size]


@pytest.fixture
def gateway(scripted, proxy_for):
    upstream = scripted(["unused"])
    proxy = proxy_for(upstream)
    backend = Notes()
    session = ToolSession([SPEC], backend)
    episode = proxy.open_episode("caps", tools=session)
    url = episode.base_url.removesuffix("/v1") + "/tools"
    return session, backend, url, episode.api_key


def test_one_limit_for_a_tool_calls_arguments_in_every_place_that_takes_them():
    from orchard_cli.harnesses.common import tools_env
    from orchard_cli.tools import ToolAccess

    assert ARGUMENTS_LIMIT == 1 << 20
    assert f'ORCHARD_TOOLS_MAX_ARGS_BYTES") or {ARGUMENTS_LIMIT})' in (HOST_TOOLS_DIR / "task_tool.py").read_text()
    assert f"ORCHARD_TOOLS_MAX_ARGS_BYTES || {ARGUMENTS_LIMIT})" in (HOST_TOOLS_DIR / "mcp_server.mjs").read_text()
    env = tools_env(ToolAccess(specs=[], url="http://h/e/t/tools", token="t"))
    assert env["ORCHARD_TOOLS_MAX_ARGS_BYTES"] == str(ARGUMENTS_LIMIT)


def test_the_gateway_refuses_oversized_arguments_unread_and_keeps_none_of_them(gateway):
    session, backend, url, token = gateway
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    big = json.dumps({"text": "x" * (ARGUMENTS_LIMIT + 10)}).encode()
    with httpx.Client(timeout=60, headers=headers) as http:
        fits = http.post(f"{url}/save", content=json.dumps({"text": "y" * (ARGUMENTS_LIMIT - 100)}).encode())
        assert fits.status_code == 200 and fits.json()["ok"], fits.text
        for body in (big, _chunks(big)):  # with a Content-Length, and chunked without one
            reply = http.post(f"{url}/save", content=body)
            assert reply.status_code == 200 and reply.json()["status"] == 413, reply.text
            assert "over the 1048576 bytes one tool call may send" in reply.json()["error"]
    assert backend.saved == 1
    kept = [d for d in session.dispatches if d.status == 413]
    assert len(kept) == 2 and all(set(d.arguments) == {"_cut"} for d in kept)
    assert len(json.dumps([d.model_dump() for d in session.dispatches])) < ARGUMENTS_LIMIT + 10_000


def test_task_tool_refuses_oversized_arguments_before_sending(gateway, tmp_path):
    session, backend, url, token = gateway
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"text": "z" * (ARGUMENTS_LIMIT + 1)}))
    with args.open() as stdin:
        done = subprocess.run([sys.executable, "-I", str(HOST_TOOLS_DIR / "task_tool.py"), "save", "-"], stdin=stdin,
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "ORCHARD_TOOLS_URL": url, "ORCHARD_TOOLS_TOKEN": token})
    assert done.returncode == 1 and "status 413" in done.stderr and "over the 1048576 bytes" in done.stderr
    assert session.dispatches == [] and backend.saved == 0  # never sent


def test_a_full_dispatch_log_refuses_further_calls_and_stays_bounded():
    backend = Notes()
    session = ToolSession([SPEC], backend, log_limit=200_000)
    replies = [session.call("save", {"text": "w" * 50_000}) for _ in range(10)]
    assert [r.status for r in replies[:4]] == [200] * 4 and {r.status for r in replies[4:]} == {429}
    assert "tool log is full" in replies[-1].error and backend.saved == 4
    assert all(set(d.arguments) == {"_cut"} for d in session.dispatches[4:])
    assert len(json.dumps([d.model_dump() for d in session.dispatches])) < 200_000 + 60_000
    assert session.call("save", {"text": "v" * (ARGUMENTS_LIMIT + 1)}).status == 413


def test_a_model_call_over_the_proxys_request_cap_is_refused_unread(scripted, proxy_for):
    upstream = scripted(["hello"] * 3)
    episode = proxy_for(upstream, max_request_bytes=64 * 1024).open_episode()
    big = json.dumps({**CHAT, "messages": [{"role": "user", "content": "q" * 100_000}]}).encode()
    with client(episode) as http:
        for body in (big, _chunks(big, 8192)):
            reply = http.post("/chat/completions", content=body, headers={"Content-Type": "application/json"})
            assert reply.status_code == 413 and "65536 bytes" in reply.json()["error"]["message"], reply.text
        assert http.post("/chat/completions", json=CHAT).status_code == 200
    records = episode.records
    assert [(r.status, r.error.type if r.error else None) for r in records] == [(413, "client"), (413, "client"),
                                                                                  (200, None)]
    assert records[0].request == "" and len(upstream.requests) == 1


def test_an_episodes_records_stop_at_their_ceiling_with_the_cut_marked(scripted, proxy_for, tmp_path):
    out = tmp_path / "calls.jsonl"
    upstream = scripted(["a" * 150_000] * 10)
    episode = proxy_for(upstream, out=out, max_record_bytes=400_000).open_episode("looping")
    statuses = []
    with client(episode) as http:
        for _ in range(8):
            statuses.append(http.post("/chat/completions", json=CHAT).status_code)
    assert statuses[:3] == [200, 200, 200] and statuses[3:] == [400] * 5  # the third passes the ceiling
    records = episode.records
    cut = records[2]
    assert cut.error.type == "capped" and "records ceiling" in cut.error.message and cut.status == 200
    assert cut.response is None and cut.request.startswith("[orchard: not kept")
    assert all(r.error.type == "capped" for r in records[3:])
    assert "records ceiling" in episode.close().capped
    assert out.stat().st_size < 400_000 + 50_000


def test_a_200_that_is_not_json_is_recorded_as_an_infra_error(proxy_for):
    class Upstream(http.server.BaseHTTPRequestHandler):
        disable_nagle_algorithm = True

        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b"<html>gateway says hello</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        episode = proxy_for(f"http://127.0.0.1:{server.server_address[1]}/v1").open_episode()
        with client(episode) as http_client:
            reply = http_client.post("/chat/completions", json=CHAT)
        assert reply.status_code == 200 and reply.text.startswith("<html>")  # relayed as it came
        [record] = episode.records
        assert record.error is not None and record.error.type == "infra" and "not JSON" in record.error.message
    finally:
        server.shutdown()
