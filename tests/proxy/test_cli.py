"""`orchard proxy` standalone: a real process, real calls, lines appended to --out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
from proxy_helpers import CHAT

from orchard_cli.proxy import read_records

ORCHARD = [sys.executable, "-m", "orchard_cli.main"]


def test_standalone_proxy_appends_one_line_per_call(scripted, tmp_path):
    upstream = scripted(dialects=("chat",))
    out = tmp_path / "calls.jsonl"
    out.write_text("")  # appended to, never truncated
    proc = subprocess.Popen([*ORCHARD, "proxy", "--upstream", upstream.start().base_url, "--port", "0",
                             "--out", str(out), "--format", "json", "--max-calls", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read().decode()
        url = json.loads(line)["url"]
        with httpx.Client(timeout=30) as http:
            assert http.post(f"{url}/v1/chat/completions", json=CHAT).status_code == 200
            with http.stream("POST", f"{url}/e/task-7/v1/responses",
                             json={"model": "m", "input": "hi", "stream": True}) as resp:
                assert b"response.completed" in resp.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0, proc.stderr.read().decode()
    raw = out.read_bytes()
    assert raw.count(b"\n") == 2 and raw.endswith(b"\n")
    first, second = read_records(out)
    assert (first.episode, first.endpoint) == ("default", "chat")
    assert (second.episode, second.endpoint, second.upstream_endpoint) == ("task-7", "responses", "chat")
    assert second.response["output"][0]["content"][0]["text"] == "echo: hi"


def test_calls_reach_the_file_while_the_proxy_runs(scripted, tmp_path):
    """`tail -f calls.jsonl` beside a running proxy shows each call as it ends, not at stop."""
    upstream = scripted(dialects=("chat",))
    out = tmp_path / "calls.jsonl"
    proc = subprocess.Popen([*ORCHARD, "proxy", "--upstream", upstream.start().base_url, "--port", "0",
                             "--out", str(out), "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
    seen = []
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read().decode()
        url = json.loads(line)["url"]
        with httpx.Client(timeout=30) as http:
            for n in (1, 2):
                assert http.post(f"{url}/e/live/v1/chat/completions", json=CHAT).status_code == 200
                answered = time.monotonic()
                while time.monotonic() - answered < 10:  # ~50 ms when quiet; generous on a loaded machine
                    if out.exists() and out.read_bytes().count(b"\n") == n:
                        break
                    time.sleep(0.02)
                seen.append((out.read_bytes().count(b"\n") if out.exists() else 0, time.monotonic() - answered))
        assert proc.poll() is None  # still serving: the lines came while it ran
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert [n for n, _ in seen] == [1, 2], seen
    assert [r.episode for r in read_records(out)] == ["live", "live"]


def test_key_variable_that_is_unset_is_a_usage_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ORCHARD_NO_SUCH_KEY"}
    run = subprocess.run([*ORCHARD, "proxy", "--upstream", "http://127.0.0.1:9/v1",
                          "--upstream-key-env", "ORCHARD_NO_SUCH_KEY"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 2
    assert "ORCHARD_NO_SUCH_KEY" in run.stderr and "not set" in run.stderr


def test_bad_upstream_url_is_a_usage_error():
    run = subprocess.run([*ORCHARD, "proxy", "--upstream", "ftp://nowhere"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and "unknown model endpoint" in run.stderr
