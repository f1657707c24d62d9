"""Problem statements: from the failing tests' names and errors only, never the mutated code."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchard_cli.tasks.synth import statement

LIBRARY = "def total(xs):\n    return sum(xs[1:])  # MUTATED LINE\n\n\ndef parse(s):\n    return int(s, 7)\n"
TESTS = """\
import lib
from lib import parse, total


def test_total():
    assert total([1, 2, 3]) == 6


class TestParse:
    def test_parse(self):
        assert parse("12") == 12


def test_fine():
    assert True


def test_through_the_module():
    assert lib.total([1]) == 1
"""


@pytest.fixture(scope="module")
def pytest_log(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("lib")
    (folder / "lib.py").write_text(LIBRARY)
    (folder / "test_lib.py").write_text(TESTS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                           "--color=no"], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout
    return done.stdout


FAILING = ["test_lib.py::test_total", "test_lib.py::TestParse::test_parse",
           "test_lib.py::test_through_the_module"]


def test_excerpts_hold_the_test_line_and_the_error_only(pytest_log) -> None:
    total, parse, module = statement.failures(pytest_log, FAILING)
    assert total.excerpt.splitlines()[0] == ">       assert total([1, 2, 3]) == 6"
    assert "assert 5 == 6" in total.excerpt
    assert parse.excerpt.splitlines()[0] == '>       assert parse("12") == 12'
    assert "assert 9 == 12" in parse.excerpt
    assert "<function total at 0x" in pytest_log  # pytest shows an address ...
    assert "<function total>([1])" in module.excerpt and " at 0x" not in module.excerpt  # not us
    for failure in (total, parse, module):
        assert "MUTATED" not in failure.excerpt and "int(s, 7)" not in failure.excerpt


def test_template_reads_like_a_report_and_is_deterministic(pytest_log) -> None:
    failed = statement.failures(pytest_log, FAILING)
    text = statement.template("lib", "1.0", failed, "lib__1.0-abc")
    assert text == statement.template("lib", "1.0", failed, "lib__1.0-abc")
    assert text.splitlines()[0] in ("lib: total gives wrong results", "lib: total is broken")
    assert "- `test_lib.py::test_total`" in text and "- `test_lib.py::TestParse::test_parse`" in text
    assert "MUTATED" not in text and "sum(xs" not in text


class _Writer(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    seen: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Writer.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        data = json.dumps({"choices": [{"message": {"role": "assistant",
                                                    "content": "Totals are off by one item"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def test_writer_model_gets_the_facts_and_nothing_else(pytest_log, monkeypatch) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Writer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("ORCHARD_WRITER_API_KEY", "k-123")
    try:
        failed = statement.failures(pytest_log, FAILING)
        text = statement.write_with_model("lib", "1.0", failed, model="writer",
                                          base_url=f"http://127.0.0.1:{server.server_port}/v1")
    finally:
        server.shutdown()
    assert text.startswith("Totals are off by one item")
    assert "- `test_lib.py::test_total`" in text
    request = _Writer.seen[-1]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer k-123"
    assert request["body"]["model"] == "writer"
    prompt = request["body"]["messages"][0]["content"]
    assert "test_lib.py::test_total" in prompt and "assert 5 == 6" in prompt
    assert "MUTATED" not in prompt and "sum(xs" not in prompt
