"""`orchard tasks synth` from scratch on small packages served by a local index (file://).

The sdists come from a PEP 503 index on disk; the tasks' environments are built by the SWE family
(uv installs pytest from PyPI, as for any SWE instance), in bubblewrap sandboxes.
"""

from __future__ import annotations

import json
import re

import pytest
from synth_pkgindex import CALC, make_index, make_sdist, project_files

from orchard_cli.evidence import Evidence
from orchard_cli.main import main
from orchard_cli.tasks.synth.source import sha256_file

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

NO_TESTS = {"src/quiet/__init__.py": "def answer():\n    return 42\n"}


@pytest.fixture()
def index(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.mktemp("index")
    archives = [make_sdist(root / "dists", "tinycalc", "0.1", CALC),
                make_sdist(root / "dists", "quiet", "1.0", NO_TESTS)]
    monkeypatch.setenv("PIP_INDEX_URL", make_index(root, archives))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    return {a.name: a for a in archives}


def _synth(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["tasks", "synth", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_synth_makes_valid_tasks_the_same_every_time(tmp_path, index, capsys, monkeypatch):
    out = tmp_path / "one.jsonl"
    code, stdout, stderr = _synth(capsys, "-p", "tinycalc==0.1", "--n", "2", "--seed", "3",
                                  "--out", str(out), "--format", "json", "--jobs", "2")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["tasks"] == 2 and report["packages"][0]["kept"] == 2
    assert report["packages"][0]["tests"] == 12
    records = _records(out)
    digest = sha256_file(index["tinycalc-0.1.tar.gz"])
    for record in records:
        assert re.fullmatch(r"tinycalc__0\.1-[0-9a-f]{10}", record["instance_id"])
        assert record["repo"] == "pypi/tinycalc" and record["test_patch"] == ""
        assert record["patch"].startswith("diff --git a/src/tinycalc/__init__.py")
        assert 1 <= len(record["FAIL_TO_PASS"]) <= 10
        assert not set(record["FAIL_TO_PASS"]) & set(record["PASS_TO_PASS"])
        assert len(record["FAIL_TO_PASS"]) + len(record["PASS_TO_PASS"]) == 12
        assert record["source"]["sha256"] == digest
        assert record["environment"]["log_parser"] == "pytest"
        statement = record["problem_statement"]
        assert all(test in statement for test in record["FAIL_TO_PASS"])
        assert "diff --git" not in statement
        changed = [line[1:].strip() for line in record["patch"].splitlines()
                   if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        assert changed and not [line for line in changed if line and line in statement]

    _check_with_the_family(out, records)

    # again from nothing (a fresh ORCHARD_HOME: new download, environment, sandboxes), one job
    monkeypatch.setenv("ORCHARD_HOME", str(tmp_path / "fresh-home"))
    again = tmp_path / "two.jsonl"
    code, _, stderr = _synth(capsys, "-p", "tinycalc==0.1", "--n", "2", "--seed", "3",
                             "--out", str(again), "--jobs", "1")
    assert code == 0, stderr
    strip = lambda rs: [{k: v for k, v in r.items() if k != "created_at"} for r in rs]  # noqa: E731
    assert strip(_records(again)) == strip(records)


def _check_with_the_family(out, records) -> None:
    """Independently of the pipeline: the family loads the file, gold resolves, the bug does not."""
    from orchard_cli.env import SandboxHandle, connect
    from orchard_cli.tasks.registry import load_suite
    from orchard_cli.tasks.synth.validate import grade_unpatched

    family, tasks = load_suite(str(out))
    assert [t.task_id for t in tasks] == [r["instance_id"] for r in records]
    env = connect("local")
    try:
        for task in tasks:
            with SandboxHandle.create(env, family.task_spec(task, "local")) as sandbox:
                family.prepare(task, sandbox)
                assert family.run_tests(task, Evidence(patch=task.record["patch"]), sandbox).resolved
            with SandboxHandle.create(env, family.task_spec(task, "local")) as sandbox:
                family.prepare(task, sandbox)
                resolved, report = grade_unpatched(family, task, sandbox)
            assert not resolved
            assert sorted(report["FAIL_TO_PASS"]["failure"]) == task.record["FAIL_TO_PASS"]
            assert not report["PASS_TO_PASS"]["failure"]
    finally:
        env.close()


@pytest.mark.parametrize("spec,message", [
    ("quiet==1.0", "error: 1 of 1 packages refused (no tasks written): quiet==1.0 ships no tests in its sdist"),
    ("tinycalc==9.9", "error: 1 of 1 packages refused (no tasks written): tinycalc==9.9: no such release "
                      "with a source distribution (latest: 0.1)"),
])
def test_a_refused_package_says_why_in_one_line_and_writes_nothing(tmp_path, index, capsys, spec, message):
    out = tmp_path / "never.jsonl"
    code, stdout, stderr = _synth(capsys, "-p", spec, "--n", "1", "--out", str(out), "--format", "json")
    assert code == 1
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == [message]
    assert not out.exists() and json.loads(stdout)["packages"][0]["refused"] in message


def test_a_refused_package_leaves_the_others_tasks(tmp_path, index, capsys):
    """`--package A --package B`: B refused, A's tasks written all the same; exit 1 says so."""
    out = tmp_path / "suite.jsonl"
    code, stdout, stderr = _synth(capsys, "-p", "quiet==1.0", "-p", "tinycalc==0.1", "--n", "1",
                                  "--out", str(out), "--format", "json")
    assert code == 1, stderr
    report = json.loads(stdout)
    assert [p["refused"] for p in report["packages"]] == ["quiet==1.0 ships no tests in its sdist", None]
    assert report["tasks"] == 1 and [r["repo"] for r in _records(out)] == ["pypi/tinycalc"]
    assert "1 of 2 packages refused (1 tasks from the others written to" in stderr


def test_tasks_from_a_repository_at_a_commit(tmp_path, capsys):
    """`--from-repo PATH --commit SHA`: the tree of that commit (not a later one, not the work
    tree's leftovers), its date the era of the environment; the family rebuilds each task's
    repository from the record and grades it."""
    import subprocess

    repo = tmp_path / "calc-repo"
    for path, text in project_files("tinycalc", "0.1", CALC).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a",
           "GIT_AUTHOR_DATE": "2023-03-04T05:06:07Z", "GIT_COMMITTER_DATE": "2023-03-04T05:06:07Z", "PATH": "/usr/bin:/bin"}
    git = lambda *args: subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,  # noqa: E731
                                       text=True, env=env).stdout.strip()
    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-qm", "tinycalc")
    first = git("rev-parse", "HEAD")
    (repo / "tests" / "test_later.py").write_text("def test_later():\n    assert False\n")
    git("add", "-A")
    git("commit", "-qm", "later")
    (repo / "tests" / "test_untracked.py").write_text("def test_untracked():\n    assert False\n")
    out = tmp_path / "mine.jsonl"
    code, stdout, stderr = _synth(capsys, "--from-repo", str(repo), "--commit", first[:10], "--n", "1",
                                  "--out", str(out), "--format", "json", "--jobs", "1")
    assert code == 0, stderr
    package = json.loads(stdout)["packages"][0]
    assert (package["package"], package["version"], package["tests"]) == ("calc-repo", first[:12], 12)  # its folder: no [project] name
    records = _records(out)
    assert records[0]["repo"] == "local/calc-repo" and records[0]["created_at"] == "2023-03-04T05:06:07Z"
    assert records[0]["source"]["type"] == "git-repo" and records[0]["source"]["revision"] == first
    assert not [t for r in records for t in r["PASS_TO_PASS"] + r["FAIL_TO_PASS"] if "later" in t or "untracked" in t]
    _check_with_the_family(out, records)
    code, _, stderr = _synth(capsys, "--from-repo", str(repo), "--commit", "f" * 40, "--out", str(out))
    assert code == 2 and f"has no commit {'f' * 40!r}" in stderr
    (repo / "tests" / "host.txt").symlink_to("/etc/hostname")  # a tree that reaches out of itself
    git("add", "-A")
    git("commit", "-qm", "a link out")
    code, _, stderr = _synth(capsys, "--from-repo", str(repo), "--commit", "HEAD", "--out", str(tmp_path / "no.jsonl"))
    assert code == 1 and "tests/host.txt" in stderr and "a link to the absolute path /etc/hostname" in stderr, stderr
    assert not (tmp_path / "no.jsonl").exists()
