"""The bundled `swe-mini` suite: well-formed metadata, and its first task is real."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from orchard_cli.main import main
from orchard_cli.tasks.registry import load_suite


@pytest.fixture(scope="module")
def tasks():
    family, tasks = load_suite("swe-mini")
    return tasks


def test_suite_size_and_spread(tasks) -> None:
    assert 30 <= len(tasks) <= 60
    by_repo = Counter(t.repo for t in tasks)
    assert len(by_repo) >= 3 and min(by_repo.values()) >= 3
    assert len({t.task_id for t in tasks}) == len(tasks)
    kinds = Counter(t.record["synth"]["kind"] for t in tasks)
    assert len(kinds) >= 6, kinds


def test_every_record_can_be_rebuilt_and_graded(tasks) -> None:
    commits: dict[tuple[str, str], set[str]] = {}
    for task in tasks:
        r = task.record
        source = r["source"]
        assert r["repo"] == f"pypi/{source['package'].lower()}"
        assert re.fullmatch(rf"{re.escape(source['package'].lower())}__{re.escape(source['version'])}"
                            r"-[0-9a-f]{10}", r["instance_id"])
        assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"])
        assert re.fullmatch(r"[0-9a-f]{40}", r["base_commit"]) and r["base_commit"] != source["commit"]
        assert r["environment_setup_commit"] == r["base_commit"]
        assert r["test_patch"] == "" and r["patch"].startswith("diff --git a/")
        assert 1 <= len(r["FAIL_TO_PASS"]) <= 10 and r["PASS_TO_PASS"]
        assert not set(r["FAIL_TO_PASS"]) & set(r["PASS_TO_PASS"])
        assert r["environment"]["log_parser"] == "pytest" and r["environment"]["python"] == "3.11"
        assert all(t in r["problem_statement"] for t in r["FAIL_TO_PASS"])
        commits.setdefault((source["package"], source["version"]), set()).add(
            (source["sha256"], source["commit"]))
    assert all(len(v) == 1 for v in commits.values())  # one sdist, one clean tree per release


@pytest.mark.bwrap
@pytest.mark.slow
def test_first_task_resolves_with_its_gold_patch(tmp_path, capsys) -> None:
    """From an empty ORCHARD_HOME: sdist from PyPI, environment built, graded by the SWE family."""
    code = main(["eval", "swe-mini", "--limit", "1", "--predictions", "gold",
                 "--out", str(tmp_path / "run"), "--format", "json", "--fail-under", "1.0"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out)["resolved"] == 1
