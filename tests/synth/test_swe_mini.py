"""The bundled `swe-mini` suite: well-formed metadata; every task resolves with its gold patch
and none with an empty one (issue 4), graded through the CLI on the local backend."""

from __future__ import annotations

import filecmp
import json
import re
import threading
from collections import Counter
from pathlib import Path

import pytest

from orchard_cli.main import main
from orchard_cli.tasks.registry import load_suite
from orchard_cli.tasks.synth import source


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


def _results(run: Path) -> list[dict]:
    path = run / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _not(category: str, run: Path) -> str:
    """The results that are not `category`, one a line (instance, category, error, tests): what a
    CI log needs to show why the check failed."""
    rows = [r for r in _results(run) if r["category"] != category]
    return "\n".join(f"{r['instance_id']}: {r['category']}: {r.get('error') or ''} {r.get('tests') or ''}"
                     for r in rows) or f"(no result other than {category} in {run / 'results.jsonl'})"


def _eval(run: Path, capsys, *args: str) -> tuple[int, dict]:
    code = main(["eval", "swe-mini", *args, "--workers", "2", "--out", str(run), "--format", "json"])
    out = capsys.readouterr().out
    try:
        return code, json.loads(out)
    except ValueError:
        return code, {"stdout": out}


@pytest.mark.bwrap
@pytest.mark.slow
def test_gold_resolves_every_task(tasks, swe_mini_home, monkeypatch, tmp_path, capsys) -> None:
    """Every task, local backend, 2 workers: sdists through pip (sha256-checked), one
    environment per package built in a sandbox, each repository rebuilt and graded. Runs in the
    session's swe-mini home, which tests/value's `graded` reuses."""
    monkeypatch.setenv("ORCHARD_HOME", str(swe_mini_home))
    run = tmp_path / "gold"
    code, card = _eval(run, capsys, "--predictions", "gold", "--fail-under", "1.0")
    assert code == 0, f"exit {code}, {card.get('by_category', card)}:\n{_not('resolved', run)}"
    assert card["resolved"] == card["total"] == len(tasks), _not("resolved", run)
    rows = _results(run)
    assert sorted(r["instance_id"] for r in rows) == sorted(t.task_id for t in tasks)
    assert all(r["category"] == "resolved" for r in rows), _not("resolved", run)
    for src in {t.record["source"]["filename"]: t.record["source"] for t in tasks}.values():
        cached = swe_mini_home / "synth" / "sdists" / f"{source.canonical(src['package'])}-{src['version']}"
        assert [source.sha256_file(p) for p in cached.iterdir() if p.is_file()] == [src["sha256"]]


def test_empty_resolves_none(tasks, swe_mini_home, monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("ORCHARD_HOME", str(swe_mini_home))
    run = tmp_path / "empty"
    code, card = _eval(run, capsys, "--predictions", "empty")
    assert code == 0, f"exit {code}, {card.get('by_category', card)}:\n{_not('empty_patch', run)}"
    assert card["resolved"] == 0 and card["total"] == len(tasks), card
    assert {k: n for k, n in card["by_category"].items() if n} == {"empty_patch": len(tasks)}, \
        _not("empty_patch", run)


@pytest.mark.slow
def test_a_tampered_cached_sdist_is_fetched_again(tasks, swe_mini_home, monkeypatch) -> None:
    """A warm cache is still checked: cached bytes whose sha256 is not the recorded one are
    dropped and the release fetched again through pip. (Bytes the index itself serves with
    another sha256 are refused: tests/synth/test_synth_source.py.)"""
    monkeypatch.setenv("ORCHARD_HOME", str(swe_mini_home))
    src = tasks[0].record["source"]
    archive = source.fetch_sdist(src["package"], src["version"], src["sha256"])  # warm after gold
    assert archive.name == src["filename"]
    archive.write_bytes(archive.read_bytes() + b"tampered")
    assert source.sha256_file(archive) != src["sha256"]
    again = source.fetch_sdist(src["package"], src["version"], src["sha256"])
    assert source.sha256_file(again) == src["sha256"]
    assert [p.name for p in again.parent.iterdir() if p.is_file()] == [src["filename"]]


def test_two_workers_stage_uv_and_the_shim_at_once() -> None:
    """The cold path of `eval --workers 2`: two threads building two environments stage uv and
    the activate shim at the same moment. (They once shared a per-process temporary file: one
    thread's rename took it from the other, FileNotFoundError, an env_error, exit 3.)"""
    from orchard_cli.tasks.swe import environment as envs

    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def stage() -> None:
        barrier.wait()
        try:
            envs.staged_uv()
            envs.opt_root()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=stage) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    staged = envs.opt_root() / "orchard" / "bin" / "uv"
    assert filecmp.cmp(staged, envs.uv_binary(), shallow=False)
    assert (envs.opt_root() / "miniconda3" / "bin" / "activate").read_text() == envs.ACTIVATE_SHIM
    assert not [p.name for p in staged.parent.iterdir() if p.name != "uv"]  # no temporary left
