"""Pre-flight: every model endpoint a run will use is asked once before any episode; a wrong URL,
key or model name is one line naming the flag, the URL and the cause (exit 2), within seconds and
before any run folder exists. Real servers on loopback: a closed port, a stdlib server that
refuses the key or serves another model, and the in-package scripted endpoint.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchard_cli.main import main
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.preflight import Endpoint, PreflightError, check_endpoints, probe


def _closed_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


class _Server:
    """A loopback HTTP server: /models answers `models` (or `status`), chat answers `chat_status`."""

    def __init__(self, *, status: int = 200, models: list[str] | None = None, chat_status: int = 404) -> None:
        outer = self
        self.seen: list[tuple[str, str | None]] = []

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                outer.seen.append((self.path, self.headers.get("Authorization")))
                if status != 200:
                    self._send(status, {"error": {"message": "Incorrect API key provided"}})
                else:
                    self._send(200, {"object": "list", "data": [{"id": m} for m in models or []]})

            def do_POST(self) -> None:  # noqa: N802
                outer.seen.append((self.path, self.headers.get("Authorization")))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send(chat_status, {"error": {"message": "The model does not exist"}})

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _run(argv: list[str], capsys) -> tuple[int, str, float]:
    started = time.monotonic()
    code = main(argv)
    return code, capsys.readouterr().err, time.monotonic() - started


@pytest.mark.parametrize("argv", [
    ["eval", "calc", "--harness", "bash", "--model", "m", "--base-url", "{url}"],
    ["distill", "calc", "--teacher", "m", "--base-url", "{url}"],
    ["rollout", "calc", "--base-url", "{url}", "--model", "m"],
    ["rl", "calc", "--base-url", "{url}", "--sync", "checkpoint", "--model", "m"],
    ["eval", "calc", "--predictions", "gold", "--judge-model", "j", "--judge-base-url", "{url}"],
])
def test_an_unreachable_endpoint_is_one_line_before_anything_runs(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = _closed_url()
    code, err, seconds = _run([a.replace("{url}", url) for a in argv] + ["--out", str(tmp_path / "out")], capsys)
    flag = next(a for a in argv if a.endswith(("-url", "base-url")))
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert lines == [f"error: model endpoint {flag} {url}: connection refused (is the server running on that port?)"]
    assert "--no-preflight" in err and "Traceback" not in err
    assert seconds < 30  # was ~18 s per task, task by task
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.run").exists() and not (tmp_path / "runs").exists()


def test_judge_asks_its_endpoint_before_judging(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("")  # a run folder as `orchard eval` leaves one (nothing graded yet)
    url = _closed_url()
    code, err, seconds = _run(["judge", str(run), "--judge-model", "j", "--judge-base-url", url], capsys)
    assert code == 2, err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: model endpoint --judge-base-url {url}: connection refused (is the server running on that port?)"]
    assert seconds < 30
    assert sorted(p.name for p in run.iterdir()) == ["results.jsonl"]  # no judge-METHOD folder


def test_a_refused_key_names_the_variable(capsys, monkeypatch):
    server = _Server(status=401)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    try:
        code, err, _ = _run(["eval", "calc", "--harness", "bash", "--model", "m", "--base-url", server.url], capsys)
    finally:
        server.close()
    assert code == 2
    assert f"error: model endpoint --base-url {server.url}: the key was refused (HTTP 401: Incorrect API key provided)" in err
    assert "$OPENAI_API_KEY" in err
    assert server.seen == [("/v1/models", "Bearer sk-wrong")]  # asked once, with the key


def test_a_model_the_server_does_not_serve(capsys):
    server = _Server(models=["qwen3-8b", "llama-3"])
    try:
        with pytest.raises(PreflightError) as caught:
            probe(Endpoint("--base-url", server.url, "gpt-x"))
    finally:
        server.close()
    assert "model 'gpt-x' is not served here (it lists: qwen3-8b, llama-3" in caught.value.message
    assert [p for p, _ in server.seen] == ["/v1/models", "/v1/chat/completions"]


def test_a_server_without_an_openai_api(capsys):
    server = _Server(status=404, chat_status=404)
    try:
        with pytest.raises(PreflightError) as caught:
            probe(Endpoint("--judge-base-url", server.url.removesuffix("/v1") + "/api", "j"))
    finally:
        server.close()
    assert "no OpenAI-compatible API here (HTTP 404 on /models, 404 on /chat/completions)" in caught.value.message
    assert "/v1" in (caught.value.hint or "")


def test_a_real_endpoint_passes_and_no_preflight_skips(tmp_path):
    endpoint = ScriptedEndpoint()
    info = endpoint.start()
    try:
        said = check_endpoints([Endpoint("--base-url", info.base_url, "scripted"),
                                Endpoint("--user-base-url", info.base_url, "scripted"),  # one probe per URL+model
                                Endpoint("--base-url", "smollm2", "smollm2")])  # in-package: not asked
    finally:
        endpoint.stop()
    assert said == [f"--base-url {info.base_url}: models listed"]
    assert check_endpoints([Endpoint("--base-url", _closed_url(), "m")], enabled=False) == []
