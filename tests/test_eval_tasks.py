"""`orchard tasks ls` and `orchard tasks show`: the registry as people and scripts see it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from orchard_cli.main import main

sys.path.insert(0, str(Path(__file__).parent / "tasks"))
import swe_repo  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks-cmd")
    return swe_repo.write_suite(root)[1]


def run(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_ls_lists_suites_and_families(capsys):
    code, out, _ = run(capsys, "tasks", "ls", "--format", "json")
    assert code == 0
    data = json.loads(out)
    names = {s["name"] for s in data["suites"]}
    assert {"swe-verified", "swe-lite"} <= names and "swe" in data["families"]
    code, out, _ = run(capsys, "tasks", "ls")
    assert code == 0 and "swe-verified" in out and "families: " in out


def test_ls_of_a_file_lists_its_instances(capsys, data_file):
    code, out, _ = run(capsys, "tasks", "ls", str(data_file))
    assert code == 0
    assert out.splitlines() == ["acme__calc-1\tacme/calc", "acme__calc-2\tacme/calc"]
    code, out, _ = run(capsys, "tasks", "ls", str(data_file), "--format", "json", "--limit", "1")
    assert [i["instance_id"] for i in json.loads(out)["instances"]] == ["acme__calc-1"]


def test_show_a_file_and_one_instance(capsys, data_file):
    code, out, _ = run(capsys, "tasks", "show", str(data_file), "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["instances"] == 2 and data["repos"] == {"acme/calc": 2}
    assert len(data["dataset_sha256"]) == 64
    code, out, _ = run(capsys, "tasks", "show", str(data_file), "--instances", "acme__calc-2",
                       "--format", "json")
    one = json.loads(out)
    assert code == 0 and one["instance_id"] == "acme__calc-2" and one["has_gold_patch"]
    assert one["FAIL_TO_PASS"] == ["test_add (tests.test_calc.CalcTests)"]
    code, out, _ = run(capsys, "tasks", "show", str(data_file), "--instances", "acme__calc-2")
    assert "add() subtracts instead of adding" in out and "FAIL_TO_PASS: 1: test_add" in out


def test_show_an_unknown_instance_is_a_usage_error(capsys, data_file):
    code, _, err = run(capsys, "tasks", "show", str(data_file), "--instances", "nope-1")
    assert code == 2 and "unknown instance id(s): nope-1" in err


@pytest.mark.skipif(not (SHARED_DATA / "swe-bench-verified.parquet").is_file(),
                    reason=f"needs {SHARED_DATA}/swe-bench-verified.parquet")
def test_show_swe_verified_from_the_data_folder(capsys, monkeypatch):
    monkeypatch.setenv("ORCHARD_SWE_DATA", str(SHARED_DATA))
    code, out, _ = run(capsys, "tasks", "show", "swe-verified", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["instances"] == 500 and data["family"] == "swe"
    assert sum(data["repos"].values()) == 500 and next(iter(data["repos"])) == "django/django"
