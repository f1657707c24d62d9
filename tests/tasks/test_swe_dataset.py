"""Loading SWE-bench data: the real Verified / Lite parquet files, filters, errors, recipes."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchard_cli.errors import InfraError, NotFoundError, UnknownNameError, UsageError
from orchard_cli.tasks.registry import find_suite, list_suites, load_suite
from orchard_cli.hub import hub_unreachable
from orchard_cli.tasks.swe.instance import eval_script, recipe_for

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
VERIFIED = DATA / "swe-bench-verified.parquet"
LITE = DATA / "swe-bench-lite.parquet"
pytestmark = pytest.mark.skipif(not VERIFIED.is_file(), reason=f"needs {VERIFIED} (shared/data)")


@pytest.fixture
def data_dir(monkeypatch):
    monkeypatch.setenv("ORCHARD_SWE_DATA", str(DATA))


def test_suites_are_listed():
    names = [s.name for s in list_suites()]
    assert {"swe-verified", "swe-lite"} <= set(names)
    assert find_suite("swe-verified").source == "princeton-nlp/SWE-bench_Verified"


def test_verified_and_lite_load_in_full(data_dir):
    family, tasks = load_suite("swe-verified")
    assert len(tasks) == 500 and len({t.task_id for t in tasks}) == 500
    assert family.dataset_sha256 == hashlib.sha256(VERIFIED.read_bytes()).hexdigest()
    first = tasks[0]
    assert first.suite == "swe-verified" and first.family == "swe"
    assert isinstance(first.record["FAIL_TO_PASS"], list) and first.record["FAIL_TO_PASS"]
    assert isinstance(first.record["PASS_TO_PASS"], list)
    assert first.record["eval_script"].startswith("#!/bin/bash")
    family, lite = load_suite("swe-lite")
    assert len(lite) == 300
    assert family.dataset_sha256 == hashlib.sha256(LITE.read_bytes()).hexdigest()


def test_dataset_path_overrides_and_sha_is_stable():
    one, tasks = load_suite("swe-lite", dataset=str(VERIFIED), limit=2)
    two, _ = load_suite(str(VERIFIED), limit=1)
    assert len(tasks) == 2 and tasks[0].suite == "swe-lite"
    assert one.dataset_sha256 == two.dataset_sha256 == hashlib.sha256(VERIFIED.read_bytes()).hexdigest()


def test_filters(data_dir):
    ids = ["django__django-11099", "astropy__astropy-12907"]
    _, tasks = load_suite("swe-verified", instances=ids)
    assert [t.task_id for t in tasks] == ["astropy__astropy-12907", "django__django-11099"]  # data order
    _, django = load_suite("swe-verified", repo="django/django")
    assert len(django) == 231 and {t.repo for t in django} == {"django/django"}
    _, sympy = load_suite("swe-verified", repo="sympy")
    assert len(sympy) == 75
    _, limited = load_suite("swe-verified", repo="django/django", limit=5)
    assert [t.task_id for t in limited] == [t.task_id for t in django[:5]]
    _, _all = load_suite("swe-verified")
    _, sliced = load_suite("swe-verified", slice_="10:20")
    assert [t.task_id for t in sliced] == [t.task_id for t in _all[10:20]]
    _, tail = load_suite("swe-verified", slice_="495:", limit=3)
    assert len(tail) == 3


def test_unknown_ids_suite_and_bad_slice_are_usage_errors(data_dir):
    with pytest.raises(UsageError) as info:
        load_suite("swe-verified", instances=["django__django-11099", "nope__nope-1", "nope__nope-2"])
    assert "nope__nope-1" in str(info.value) and "nope__nope-2" in str(info.value)
    assert "\n" not in str(info.value) and "django__django-11099" not in str(info.value)
    with pytest.raises(UnknownNameError) as info:
        load_suite("swe-verifed")
    assert "swe-verified" in str(info.value) and "swe-lite" in str(info.value)
    with pytest.raises(UsageError):
        load_suite("swe-verified", slice_="a:b")
    with pytest.raises(UsageError):
        load_suite("swe-verified", repo="no/such-repo")


def test_missing_data_folder_file_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("ORCHARD_SWE_DATA", str(tmp_path))
    with pytest.raises(NotFoundError) as info:
        load_suite("swe-lite")
    assert "swe-bench-lite.parquet" in str(info.value)


def test_jsonl_file_with_own_environment(tmp_path):
    record = {"instance_id": "a__b-1", "repo": "a/b", "base_commit": "0" * 40, "test_patch": "x",
              "FAIL_TO_PASS": '["t1"]', "PASS_TO_PASS": [], "created_at": "2024-01-02",
              "environment": json.dumps({"python": "3.11", "test_cmd": "pytest -rA"})}
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(record) + "\n")
    family, tasks = load_suite(str(path))
    assert tasks[0].suite == "mine" and tasks[0].record["FAIL_TO_PASS"] == ["t1"]
    recipe = family.recipe(tasks[0])
    assert recipe.python == "3.11" and recipe.log_parser == "pytest"
    record["environment"] = {"python": "3.11", "pyhton_extra": 1}
    path.write_text(json.dumps(record) + "\n")
    _, tasks = load_suite(str(path))
    with pytest.raises(UsageError, match="pyhton_extra"):
        recipe_for(tasks[0].record)
    path.write_text("{not json\n")
    with pytest.raises(UsageError, match="mine.jsonl:1"):
        load_suite(str(path))


def test_official_recipe_and_eval_script(data_dir):
    family, (task,) = load_suite("swe-verified", instances=["django__django-11099"])
    recipe = family.recipe(task)
    assert recipe.python == "3.6" and recipe.install == ["python -m pip install -e ."]
    assert recipe.requirements_files and recipe.log_parser == "parse_log_django"
    script = eval_script(task.record, recipe)
    original = task.record["eval_script"]
    assert "python -m pip install -e ." in original and "python -m pip install -e ." not in script
    assert script.count("\n") == original.rstrip("\n").count("\n")  # exactly one line less
    assert ": '>>>>> Start Test Output'" in script and "conda activate testbed" in script
    # the same repo/version shares an environment; another version does not
    _, django = load_suite("swe-verified", repo="django/django")
    keys = {family.env_key(t) for t in django if t.record["version"] == task.record["version"]}
    assert len(keys) == 1
    assert family.env_key(next(t for t in django if t.record["version"] != "3.0")) not in keys


def test_eval_script_built_from_the_spec_when_missing(data_dir):
    family, (task,) = load_suite("swe-verified", instances=["sympy__sympy-20590"])
    record = dict(task.record)
    del record["eval_script"]
    script = eval_script(record, family.recipe(task))
    assert "bin/test -C --verbose sympy/" in script
    assert script.index(">>>>> Start Test Output") < script.index("bin/test") < script.index(">>>>> End Test Output")
    assert f"git checkout {record['base_commit']} sympy/" in script


class DeadHub:
    """A loopback 'hub' that accepts each connection and closes it unanswered, counting them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture
def dead_hub(monkeypatch):
    hub = DeadHub()
    for name in ("ORCHARD_SWE_DATA", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # urllib reads the lower-case one first
    yield hub
    hub.sock.close()


def test_unreachable_hub_fails_at_once_and_names_the_local_file(dead_hub):
    with pytest.raises(InfraError) as info:
        load_suite("swe-verified")
    message, hint = str(info.value), info.value.hint or ""
    assert f"no hub at {dead_hub.url}" in message and "SWE-bench_Verified" in message
    assert "\n" not in message
    assert "--dataset PATH" in hint and "ORCHARD_SWE_DATA" in hint and "swe-bench-verified.parquet" in hint
    assert dead_hub.connections == 1  # one probe, no retry loop (huggingface_hub alone makes 6 tries)


def test_hub_probe_counts_any_http_answer_as_reachable():
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert hub_unreachable(f"http://127.0.0.1:{server.server_port}") is None
    finally:
        server.shutdown()
        server.server_close()


def test_offline_mode_reads_the_cache_only_and_says_so(dead_hub, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", "tasks", "show", "swe-lite",
                           "--format", "json"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["instances"] is None
    assert "HF_HUB_OFFLINE" in shown["unavailable"] and "SWE-bench_Lite" in shown["unavailable"]
    assert "swe-bench-lite.parquet" in shown["hint"] and "--dataset PATH" in shown["hint"]
    assert dead_hub.connections == 0  # offline: not even a probe
