"""The real upstream key never reaches a harness and is never written to disk."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from proxy_helpers import client

from orchard_cli.proxy import read_records

KEY_VAR = "ORCHARD_TEST_UPSTREAM_KEY"

# A fake harness: it knows only what its environment tells it, and sends its whole environment to
# the model (as a harness that prints its env into the conversation would), streamed and not.
FAKE_HARNESS = r"""
import json, os, sys, urllib.request
env = dict(os.environ)
open("env-dump.json", "w").write(json.dumps(env))
print(json.dumps(env))
def post(path, body):
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + path, data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read().decode()
dump = json.dumps(env)
print(post("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": dump}]}))
print(post("/responses", {"model": "m", "input": dump, "stream": True}))
"""


def _files_containing(roots: list[Path], needle: bytes) -> list[Path]:
    hits = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and needle in path.read_bytes():
                hits.append(path)
    return hits


def test_real_key_never_enters_the_harness_nor_any_file(scripted, proxy_for, tmp_path, monkeypatch):
    real_key = f"sk-real-{secrets.token_hex(16)}"
    monkeypatch.setenv(KEY_VAR, real_key)  # the user's shell has it; the harness must not
    home = Path(os.environ["ORCHARD_HOME"])
    upstream = scripted(key_env=KEY_VAR, dialects=("chat",))  # echoes; answers 401 without the key
    proxy = proxy_for(upstream, out=home / "runs" / "calls.jsonl")
    assert proxy.config.key_env == KEY_VAR
    episode = proxy.open_episode("leaky-harness")
    workdir = tmp_path / "sandbox"
    workdir.mkdir()
    harness_env = {"PATH": os.environ["PATH"], "HOME": str(workdir), **episode.env()}

    run = subprocess.run([sys.executable, "-c", FAKE_HARNESS], cwd=workdir, env=harness_env,
                         capture_output=True, timeout=60)
    (workdir / "harness.log").write_bytes(run.stdout + run.stderr)
    assert run.returncode == 0, run.stderr.decode()

    assert [r["auth_ok"] for r in upstream.requests] == [True, True]  # the proxy swapped in the key
    assert episode.token.encode() in run.stdout  # the harness saw its token ...
    assert real_key.encode() not in run.stdout  # ... and never the real key
    records = episode.records
    assert len(records) == 2 and all(r.error is None for r in records)

    # a key that leaks into a body anyway (a tool printing it) is redacted in every record
    leak = client(episode).post("/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": f"found {real_key} in a file"}]})
    assert leak.status_code == 200
    leaked = episode.records[-1]
    assert real_key not in leaked.model_dump_json()
    assert leaked.request["messages"][0]["content"] == "found [REDACTED] in a file"
    episode.close()
    proxy.stop()

    assert len(read_records(home / "runs" / "calls.jsonl")) == 3
    assert _files_containing([home], episode.token.encode())  # the env dump did reach the disk
    assert _files_containing([home, tmp_path], real_key.encode()) == []
    assert real_key not in json.dumps([r.model_dump() for r in episode.records])


def test_an_upstream_that_echoes_the_key_in_an_error_never_shows_it(proxy_for, tmp_path, monkeypatch):
    """A gateway answering 401 with the Authorization header it got: the harness and the records
    see [REDACTED] where the key was."""
    import http.server
    import threading

    real_key = f"sk-real-{secrets.token_hex(16)}"
    monkeypatch.setenv(KEY_VAR, real_key)

    class Echo(http.server.BaseHTTPRequestHandler):
        disable_nagle_algorithm = True

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"error": {"message": f"bad key: {self.headers.get('Authorization')}"}}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "calls.jsonl"
        proxy = proxy_for(f"http://127.0.0.1:{server.server_port}/v1", key_env=KEY_VAR, out=out, max_retries=0)
        episode = proxy.open_episode("echoing-gateway")
        with client(episode) as http:
            answer = http.post("/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 401
        assert real_key not in answer.text and "[REDACTED]" in answer.text
        episode.close()
    finally:
        server.shutdown()
    assert real_key.encode() not in out.read_bytes()
