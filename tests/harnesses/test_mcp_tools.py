"""A task's tools reach every harness: OpenClaw, Codex and ZeroClaw load them over MCP (orchard's
mcp_server.mjs), orchard's bash agent calls them as a command (task_tool.py); each call goes
through the recording proxy's tool gateway to the episode's `ToolSession`.

The configs are checked without binaries; the real OpenClaw and Codex run one episode each in a
local sandbox against a scripted model that calls a task tool (marked `harness`)."""

from __future__ import annotations

import ast
import http.server
import json
import re
import socket
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any, Iterator

import pytest

from orchard_cli.harnesses import load_harness
from orchard_cli.harnesses.bash_agent import TASK_TOOL_COPY
from orchard_cli.harnesses.bash_agent_main import TASK_TOOL as MAIN_TASK_TOOL
from orchard_cli.harnesses.bash_agent_main import tools_section
from orchard_cli.harnesses.base import HarnessContext
from orchard_cli.harnesses.codex import Codex
from orchard_cli.harnesses.common import MCP_SDK_DIR, MCP_SERVER, TASK_TOOL, sandbox_base_url
from orchard_cli.env.models import Mount
from orchard_cli.harnesses.install import MCP_SDK, NODE, harnesses_root
from orchard_cli.harnesses.openclaw import render_config as openclaw_config
from orchard_cli.harnesses.zeroclaw import render_config as zeroclaw_config
from orchard_cli.models.scripted import ScriptedEndpoint, ScriptedReply
from orchard_cli.models.scripted_app import Turn
from orchard_cli.proxy import start_proxy
from orchard_cli.proxy.sse import encode_event
from orchard_cli.proxy.translate import ResponsesStream, responses_to_chat
from orchard_cli.tools import ToolAccess, ToolReply, ToolSession, ToolSpec
from orchard_cli.tools.spec import ARGUMENTS_LIMIT, HOST_TOOLS_DIR, SANDBOX_TOOLS_DIR

SPECS = [
    ToolSpec(name="add_note", description="Save a note under a title.", service="notes", action="add",
             input_schema={"type": "object", "required": ["title", "body"],
                           "properties": {"title": {"type": "string", "description": "the note's title"},
                                          "body": {"type": "string"}}}),
    ToolSpec(name="list_notes", description="The titles of the saved notes.", service="notes", action="list"),
]
NOTE = {"title": "groceries", "body": "milk, eggs"}
ACCESS = ToolAccess(specs=[s.public() for s in SPECS], url="http://127.0.0.1:9/e/tok/tools", token="tok")
TOOLS_ENV = {"ORCHARD_TOOLS_URL": "http://127.0.0.1:9/e/tok/tools", "ORCHARD_TOOLS_TOKEN": "tok",
             "ORCHARD_TOOLS_MAX_ARGS_BYTES": str(ARGUMENTS_LIMIT)}
CONTEXT = HarnessContext(prompt="p", model="m", base_url="http://127.0.0.1:9/e/tok/v1", api_key="tok",
                         tools=ACCESS)
BARE = CONTEXT.model_copy(update={"tools": None})


class Notes:
    """A ToolBackend: notes in memory."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}

    def call(self, service: str, action: str, arguments: dict[str, Any]) -> ToolReply:
        if action == "add":
            self.notes[arguments["title"]] = arguments["body"]
            return ToolReply(result={"saved": arguments["title"], "count": len(self.notes)})
        return ToolReply(result=sorted(self.notes))


# -- configs, without binaries ----------------------------------------------------------------------
def test_openclaw_config_loads_the_tools_as_an_mcp_server_with_tool_search_off():
    config = openclaw_config(CONTEXT)
    assert config["mcp"] == {"servers": {"task": {
        "command": NODE.sandbox_entry(), "args": [MCP_SERVER],
        "env": {**TOOLS_ENV, "ORCHARD_MCP_SDK": MCP_SDK_DIR}}}}
    assert config["tools"] == {"toolSearch": False}
    assert "mcp" not in openclaw_config(BARE) and "tools" not in openclaw_config(BARE)


def _overrides(argv: list[str]) -> dict[str, Any]:
    """Codex's `-c key=value` overrides, each value read as TOML."""
    return {arg.split("=", 1)[0]: tomllib.loads(f"v = {arg.split('=', 1)[1]}")["v"]
            for flag, arg in zip(argv, argv[1:]) if flag == "-c"}


def test_codex_argv_loads_the_tools_as_a_required_mcp_server_approved_without_asking():
    overrides = _overrides(Codex().argv(CONTEXT, "/workspace"))
    server = {k.removeprefix("mcp_servers.task."): v for k, v in overrides.items() if k.startswith("mcp_servers.")}
    assert server == {"command": NODE.sandbox_entry(), "args": [MCP_SERVER],
                      "env": {**TOOLS_ENV, "ORCHARD_MCP_SDK": MCP_SDK_DIR}, "required": True,
                      "startup_timeout_sec": 60, "tool_timeout_sec": 300, "default_tools_approval_mode": "approve"}
    bare = Codex().argv(BARE, "/workspace")
    assert not any(arg.startswith("mcp_servers.") for arg in bare) and bare[-2:] == ["--", "p"]


def test_zeroclaw_config_grants_the_tools_server_through_a_bundle():
    config = tomllib.loads(zeroclaw_config(CONTEXT))
    assert config["mcp"]["enabled"] is True and config["mcp"]["deferred_loading"] is False
    assert config["mcp"]["servers"] == [{"name": "task", "transport": "stdio", "command": NODE.sandbox_entry(),
                                         "args": [MCP_SERVER], "env": {**TOOLS_ENV, "ORCHARD_MCP_SDK": MCP_SDK_DIR}}]
    bundles = config["agents"]["orchard"]["mcp_bundles"]
    assert [config["mcp_bundles"][b]["servers"] for b in bundles] == [["task"]]
    bare = tomllib.loads(zeroclaw_config(BARE))
    assert "mcp" not in bare and "mcp_bundles" not in bare and "mcp_bundles" not in bare["agents"]["orchard"]


def test_bash_agent_lists_the_tools_in_its_prompt_and_calls_them_with_task_tool():
    assert TASK_TOOL == f"{SANDBOX_TOOLS_DIR}/task_tool.py"  # where the MCP harnesses have it bound
    assert MAIN_TASK_TOOL == TASK_TOOL_COPY  # the bash agent's own copy, written into the sandbox
    harness = load_harness("bash")
    assert "--tools-file" in harness.command(CONTEXT, "/w") and "--tools-file" not in harness.command(BARE, "/w")
    section = tools_section(ACCESS.specs)
    assert f"task-tool NAME '" in section and f"python3 {MAIN_TASK_TOOL}" in section
    assert "task-tool list_notes '{}'" in section  # the example calls a tool that needs no argument
    for spec in SPECS:
        assert f"### {spec.name}\n{spec.description}\n" in section
        assert json.dumps(spec.input_schema, sort_keys=True) in section


def test_every_harness_binds_the_tool_programs():
    assert {p.name for p in HOST_TOOLS_DIR.iterdir()} >= {"mcp_server.mjs", "task_tool.py"}
    programs = Mount(source=str(HOST_TOOLS_DIR), target=SANDBOX_TOOLS_DIR, read_only=True)
    assert load_harness("bash").mounts() == []  # writes its copy in: it runs where nothing can be bound
    for name in ("codex", "openclaw"):   # an MCP harness binds the SDK too (when it is installed at all)
        harness = load_harness(name)
        if harness.check() == [] and MCP_SDK.installed_version():
            assert programs in harness.mounts() and MCP_SDK.mount() in harness.mounts()


def test_install_script_pins_the_mcp_sdk_as_the_adapters_do():
    script = (Path(__file__).resolve().parents[2] / "scripts" / "install-harnesses.sh").read_text()
    assert re.search(r"^MCP_SDK_VERSION=(\S+)$", script, re.M).group(1) == MCP_SDK.version
    assert f"install_one mcp {MCP_SDK.package} " in script and MCP_SDK.entry in script


def test_a_missing_mcp_sdk_is_named_only_when_the_task_has_tools(monkeypatch, tmp_path):
    monkeypatch.setenv("ORCHARD_HARNESSES_DIR", str(tmp_path))
    run = load_harness("openclaw").run(None, CONTEXT)  # type: ignore[arg-type]  # never reaches the sandbox
    assert run.exit_code is None and f"{MCP_SDK.spec} is not installed" in (run.error or "")
    run = load_harness("openclaw").run(None, BARE)  # type: ignore[arg-type]
    assert "modelcontextprotocol" not in (run.error or "")


# -- task_tool.py against the real gateway ----------------------------------------------------------
def test_task_tool_runs_on_python_3_6():
    source = (HOST_TOOLS_DIR / "task_tool.py").read_text()
    ast.parse(source, feature_version=(3, 6))
    assert "from __future__ import annotations" not in source   # 3.7+


@pytest.fixture()
def gateway() -> Iterator[tuple[ToolSession, dict[str, str]]]:
    """The real proxy's tool gateway for one episode with the notes tools; the env that reaches it."""
    endpoint = ScriptedEndpoint(["unused"])
    proxy = start_proxy(endpoint)
    session = ToolSession(SPECS, Notes())
    episode = proxy.open_episode("tools", tools=session)
    env = {"PATH": "/usr/bin:/bin", "ORCHARD_TOOLS_URL": episode.base_url.removesuffix("/v1") + "/tools",
           "ORCHARD_TOOLS_TOKEN": episode.api_key}
    try:
        yield session, env
    finally:
        endpoint.stop()
        proxy.stop()


def _task_tool(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", str(HOST_TOOLS_DIR / "task_tool.py"), *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=60)


def test_task_tool_lists_and_calls_through_the_gateway(gateway):
    session, env = gateway
    listed = _task_tool(env, "--list")
    assert listed.returncode == 0 and json.loads(listed.stdout) == [s.public() for s in SPECS]
    done = _task_tool(env, "add_note", json.dumps(NOTE))
    assert done.returncode == 0 and json.loads(done.stdout) == {"saved": "groceries", "count": 1}
    done = _task_tool(env, "list_notes", "-", stdin="{}")
    assert done.returncode == 0 and json.loads(done.stdout) == ["groceries"]
    bad = _task_tool(env, "add_note", '{"title": "x"}')                 # the session's schema check: a 400
    assert bad.returncode == 1 and "status 400" in bad.stderr and "'body' is a required property" in bad.stderr
    unknown = _task_tool(env, "send_mail", "{}")                        # the gateway's 404
    assert unknown.returncode == 1 and "HTTP 404" in unknown.stderr and "no tool named 'send_mail'" in unknown.stderr
    assert _task_tool(env, "add_note", "{not json").returncode == 2     # never sent
    assert [(d.tool, d.status) for d in session.dispatches] == [
        ("add_note", 200), ("list_notes", 200), ("add_note", 400), ("send_mail", 404)]
    stranger = _task_tool({**env, "ORCHARD_TOOLS_TOKEN": "orch-ep-nope"}, "--list")
    assert stranger.returncode == 1 and "HTTP 401" in stranger.stderr


# -- task-tool without a process per call: task_tool.sh to the Helper a long-lived program serves ---
CALLS = [("--list",), ("add_note", json.dumps(NOTE)), ("add_note", "-"), ("add_note", '{"title": "x"}'),
         ("send_mail", "{}"), ("add_note", "{not json"), ("add_note", "[1]"), ("list_notes",),
         ("add_note", "-"), ("add_note", "a", "b"), ("--help",)]
STDIN = {2: '{"title": "café", "body": "crème \\u00e9 ü"}\n', 8: ""}


@pytest.fixture()
def helper(gateway, monkeypatch, tmp_path):
    """task_tool.py's Helper for the gateway's episode (as the bash agent serves it), and an env
    for task_tool.sh whose `python3` fails: an answer can only have come from the helper."""
    import importlib.util

    session, env = gateway
    for key in ("ORCHARD_TOOLS_URL", "ORCHARD_TOOLS_TOKEN"):
        monkeypatch.setenv(key, env[key])
    spec = importlib.util.spec_from_file_location("task_tool_under_test", HOST_TOOLS_DIR / "task_tool.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    server = module.Helper().start()
    no_python = tmp_path / "no-python"
    no_python.mkdir()
    (no_python / "python3").write_text("#!/bin/sh\necho 'a python3 ran' >&2\nexit 97\n")
    (no_python / "python3").chmod(0o755)
    try:
        yield session, env, {**env, module.PORT_ENV: str(server.port), "PATH": f"{no_python}:/usr/bin:/bin"}
    finally:
        server.shutdown()
        server.server_close()


def _shell_tool(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(HOST_TOOLS_DIR / "task_tool.sh"), *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=60)


def test_task_tool_sh_answers_as_task_tool_py_through_the_helper_without_python(helper):
    session, env, fast = helper
    slow = [_task_tool(env, *args, stdin=STDIN.get(i, "")) for i, args in enumerate(CALLS)]
    slow_dispatches = [(d.tool, d.arguments, d.status, d.result) for d in session.dispatches]
    start = len(session.dispatches)
    session.backend.notes.clear()  # the same state for the same calls
    quick = [_shell_tool(fast, *args, stdin=STDIN.get(i, "")) for i, args in enumerate(CALLS)]
    usage = {len(CALLS) - 2, len(CALLS) - 1}  # not helper calls: task_tool.py prints the usage (no python3 here)
    for i, (a, b) in enumerate(zip(slow, quick)):
        if i in usage:
            assert b.returncode == 97 and "a python3 ran" in b.stderr
            continue
        assert (b.returncode, b.stdout, b.stderr) == (a.returncode, a.stdout, a.stderr), CALLS[i]
    assert [a.returncode for a in slow] == [0, 0, 0, 1, 1, 2, 2, 0, 2, 2, 0]
    assert json.loads(quick[7].stdout) == ["café", "groceries"]  # stdin, non-ASCII, byte lengths
    assert [(d.tool, d.arguments, d.status, d.result) for d in session.dispatches[start:]] == slow_dispatches


def test_task_tool_sh_without_its_helper_runs_task_tool_py(gateway, tmp_path):
    session, env = gateway
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    for extra in ({}, {"ORCHARD_TASK_TOOL_PORT": str(port)}):
        done = _shell_tool({**env, **extra}, "add_note", "-", stdin=json.dumps(NOTE))
        assert done.returncode == 0 and json.loads(done.stdout)["saved"] == "groceries", done.stderr
    assert len(session.dispatches) == 2



def test_the_helper_refuses_arguments_over_the_cap_as_task_tool_py_does(gateway, monkeypatch):
    """Over ORCHARD_TOOLS_MAX_ARGS_BYTES the helper answers what task_tool.py says (413, nothing
    sent); far over it (a declared size over 4x the cap) it answers without reading them; a caller
    without the episode's token (another process on the host's loopback) gets nothing done."""
    import importlib.util
    import socket as socket_

    session, env = gateway
    capped = {**env, "ORCHARD_TOOLS_MAX_ARGS_BYTES": "100"}
    for key, value in capped.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("task_tool_capped", HOST_TOOLS_DIR / "task_tool.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    server = module.Helper().start()
    try:
        over = json.dumps({"title": "t", "body": "x" * 150})
        slow = _task_tool(capped, "add_note", over)
        quick = _shell_tool({**capped, module.PORT_ENV: str(server.port)}, "add_note", over)
        assert slow.returncode == quick.returncode == 1 and "status 413" in slow.stderr, slow.stderr
        assert (quick.stdout, quick.stderr) == (slow.stdout, slow.stderr)
        def ask(line: bytes) -> str:
            with socket_.create_connection(("127.0.0.1", server.port), timeout=30) as raw:
                raw.sendall(line)
                return raw.makefile("rb").read().decode()

        token = env["ORCHARD_TOOLS_TOKEN"].encode()
        answer = ask(b"8 10000000000 " + token + b"\nadd_note")  # 10 GB declared, none sent
        assert answer.startswith("1\n") and "status 413" in answer and "10000000000 bytes" in answer, answer
        for head in (b"8 2\n", b"8 2 not-the-token\n"):  # 127.0.0.1 is the host's under --network full
            answer = ask(head + b"add_note{}")
            assert answer.startswith(("1\n", "2\n")) and "413" not in answer, answer
    finally:
        server.shutdown()
        server.server_close()
    assert session.dispatches == []

# -- the real harnesses in a sandbox ----------------------------------------------------------------
def _open_episode(rig, session: ToolSession, replies: list[Any] | None = None, *, upstream: str | None = None):
    """The rig's proxy and upstream, and an episode that serves `session`'s tools."""
    rig.start(replies, upstream=upstream, max_calls=6)
    rig.episode = rig.proxy.open_episode("mcp-tools", max_calls=6, tools=session)
    return rig.episode


def _context(rig, sandbox, **fields: Any) -> HarnessContext:
    base_url = sandbox_base_url(sandbox)
    access = ToolAccess(specs=[s.public() for s in SPECS], url=base_url.removesuffix("/v1") + "/tools",
                        token=rig.episode.api_key)
    return rig.context(sandbox, tools=access, prompt="Save a note: groceries, milk and eggs.", **fields)


def _dispatched(session: ToolSession) -> list[tuple[str, dict[str, Any], int | None]]:
    return [(d.tool, d.arguments, d.status) for d in session.dispatches]


@pytest.mark.bwrap
def test_bash_agent_calls_a_task_tool_from_the_shell(rig):
    session = ToolSession(SPECS, Notes())
    no_python = "mkdir -p /tmp/np && printf '#!/bin/sh\\nexit 97\\n' >/tmp/np/python3 && chmod +x /tmp/np/python3"
    # the agent's own command, on its PATH; answered by the agent's helper (a python3 would fail)
    command = f"{no_python} && PATH=/tmp/np:$PATH task-tool add_note '{json.dumps(NOTE)}'"
    _open_episode(rig, session, [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}, "Saved."])
    harness = load_harness("bash")
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, _context(rig, sandbox))
    assert run.exit_code == 0 and run.error is None, run
    assert _dispatched(session) == [("add_note", NOTE, 200)]
    first, second = rig.episode.records
    system = first.request["messages"][0]["content"]
    assert all(f"### {s.name}\n" in system for s in SPECS) and f"python3 {MAIN_TASK_TOOL}" in system
    result = second.request["messages"][-1]
    assert result["role"] == "tool" and '{"saved": "groceries", "count": 1}' in result["content"]


@pytest.mark.harness
@pytest.mark.bwrap
def test_openclaw_shows_the_task_tools_and_calls_one_over_mcp(rig, installed_harnesses):
    session = ToolSession(SPECS, Notes())
    _open_episode(rig, session, [{"tool_calls": [{"name": "task__add_note", "arguments": NOTE}]}, "Saved."])
    harness = load_harness("openclaw")
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, _context(rig, sandbox, timeout_seconds=300))
    assert run.exit_code == 0 and run.error is None and run.info["tool_calls"] == "1", run
    assert _dispatched(session) == [("add_note", NOTE, 200)]
    first, second = rig.episode.records
    tools = {t["function"]["name"]: t["function"] for t in first.request["tools"]}
    for spec in SPECS:   # every task tool, as a plain tool with its schema (Tool Search is off)
        shown = tools[f"task__{spec.name}"]
        assert shown["description"] == spec.description and shown["parameters"] == spec.input_schema
    assert "tool_search" not in tools and "exec" in tools
    result = next(m for m in second.request["messages"] if m["role"] == "tool")
    assert json.loads(result["content"]) == {"saved": "groceries", "count": 1}


class _NamespacedUpstream(http.server.BaseHTTPRequestHandler):
    """Scripted Responses streams in which a call named `mcp__<server>__<tool>` comes as Codex's
    namespaced function call (`namespace: "mcp__<server>"`, `name: "<tool>"`): Codex offers MCP
    tools as a `namespace` tool and dispatches only calls that name their namespace."""

    disable_nagle_algorithm = True
    replies: list[ScriptedReply] = []
    served = 0

    @staticmethod
    def _split(item: Any) -> None:
        if isinstance(item, dict) and item.get("type") == "function_call" and item.get("name", "").startswith("mcp__"):
            item["namespace"], _, item["name"] = item["name"].rpartition("__")

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        reply = cls.replies[min(cls.served, len(cls.replies) - 1)]
        cls.served += 1
        stream = ResponsesStream(body)
        events = stream.start()
        for chunk in Turn(reply, responses_to_chat(body), body.get("model") or "m").chunks():
            events += stream.feed(chunk)
        out = b""
        for event in events + stream.finish():
            head, _, data = event.partition(b"data: ")
            payload = json.loads(data)
            self._split(payload.get("item"))
            for item in (payload.get("response") or {}).get("output") or ():
                self._split(item)
            out += encode_event(payload, head.decode().removeprefix("event: ").strip() or None)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture()
def namespaced_upstream() -> Iterator[type[_NamespacedUpstream]]:
    handler = type("Upstream", (_NamespacedUpstream,), {"served": 0, "replies": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.harness
@pytest.mark.bwrap
def test_codex_shows_the_task_tools_and_calls_one_over_mcp(rig, installed_harnesses, namespaced_upstream):
    namespaced_upstream.replies = [ScriptedReply.model_validate(
        {"tool_calls": [{"name": "mcp__task__add_note", "arguments": NOTE}]}), ScriptedReply(content="Saved.")]
    session = ToolSession(SPECS, Notes())
    _open_episode(rig, session, upstream=namespaced_upstream.url)
    harness = load_harness("codex")
    sandbox = rig.sandbox(harness)
    run = harness.run(sandbox, _context(rig, sandbox, timeout_seconds=120))
    assert run.exit_code == 0 and run.error is None and run.info["mcp_tool_calls"] == "1", run
    assert _dispatched(session) == [("add_note", NOTE, 200)]
    first, second = rig.episode.records
    (namespace,) = [t for t in first.request["tools"] if t.get("type") == "namespace"]
    assert namespace["name"] == "mcp__task"
    shown = {t["name"]: t for t in namespace["tools"]}
    assert set(shown) == {s.name for s in SPECS}
    for spec in SPECS:
        assert shown[spec.name]["description"] == spec.description
        assert shown[spec.name]["parameters"] == spec.input_schema
    call = next(i for i in second.request["input"] if i.get("type") == "function_call")
    assert (call["namespace"], call["name"], json.loads(call["arguments"])) == ("mcp__task", "add_note", NOTE)
    output = next(i for i in second.request["input"] if i.get("type") == "function_call_output")
    parts = output["output"] if isinstance(output["output"], list) else [{"text": output["output"]}]
    assert output["call_id"] == call["call_id"]
    assert '{"saved":"groceries","count":1}' in [part.get("text") for part in parts]


# -- the MCP server itself, over stdio, on orchard's Node -------------------------------------------
CLIENT = """
const [sdk, server] = process.argv.slice(2);
const { Client } = await import(sdk + "/dist/esm/client/index.js");
const { StdioClientTransport } = await import(sdk + "/dist/esm/client/stdio.js");
const client = new Client({ name: "orchard-test", version: "0" });
await client.connect(new StdioClientTransport({ command: process.execPath, args: [server],
  env: { ...process.env, ORCHARD_MCP_SDK: sdk }, stderr: "inherit" }));
const out = { tools: (await client.listTools()).tools };
out.saved = await client.callTool({ name: "add_note", arguments: JSON.parse(process.env.NOTE) });
out.invalid = await client.callTool({ name: "add_note", arguments: { title: "x" } });
out.unknown = await client.callTool({ name: "send_mail", arguments: {} });
out.big = await client.callTool({ name: "add_note", arguments: { title: "x", body: "y".repeat(1100000) } });
console.log(JSON.stringify(out));
await client.close();
"""


@pytest.mark.harness
def test_mcp_server_lists_the_tools_and_forwards_calls(gateway, installed_harnesses, tmp_path):
    session, env = gateway
    script = tmp_path / "client.mjs"
    script.write_text(CLIENT)
    sdk = MCP_SDK.path(harnesses_root()) / "node_modules" / MCP_SDK.package
    proc = subprocess.run([str(NODE.entry_path()), str(script), str(sdk), str(HOST_TOOLS_DIR / "mcp_server.mjs")],
                          capture_output=True, text=True, timeout=60, env={**env, "NOTE": json.dumps(NOTE)})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["tools"] == [{"name": s.name, "description": s.description, "inputSchema": s.input_schema}
                            for s in SPECS]
    assert out["saved"] == {"content": [{"type": "text", "text": '{"saved":"groceries","count":1}'}], "isError": False}
    assert out["invalid"]["isError"] and "'body' is a required property" in out["invalid"]["content"][0]["text"]
    assert out["unknown"]["isError"] and "HTTP 404" in out["unknown"]["content"][0]["text"]
    assert out["big"]["isError"] and "over the 1048576 bytes one tool call may send" in out["big"]["content"][0]["text"]
    # the oversized call was refused before it was sent: not among the dispatches
    assert [(d.tool, d.status) for d in session.dispatches] == [("add_note", 200), ("add_note", 400), ("send_mail", 404)]
    missing = subprocess.run([str(NODE.entry_path()), str(HOST_TOOLS_DIR / "mcp_server.mjs")], capture_output=True,
                             text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode == 2 and "ORCHARD_TOOLS_URL and ORCHARD_TOOLS_TOKEN must be set" in missing.stderr
