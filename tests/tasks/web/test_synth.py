"""Web task synthesis: deterministic, well-formed, the bundled web-mini suite is what the
generator makes, and every state check's query runs on its fixture and fails there (a task that
changes nothing does not pass). No browser: the three-way validation runs elsewhere."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from orchard_cli.tasks.web.synth import SITES, SUITE_SEED, SUITE_SIZE, dump, generate, plan, templates, write_suite
from orchard_cli.tasks.web.taskfile import WebTask

SUITE = Path(__file__).resolve().parents[3] / "tasks" / "data" / "web-mini"


@pytest.fixture(scope="module")
def suite() -> list[dict]:
    return generate(SUITE_SIZE, SUITE_SEED)


def test_generation_is_deterministic_and_seeded():
    assert generate(12, 5) == generate(12, 5)
    assert [t["id"] for t in generate(8, 5)] != [t["id"] for t in generate(8, 6)]
    assert generate(12, 5)[:8] == generate(8, 5)


def test_tasks_are_well_formed(suite):
    assert len(templates()) >= 10 and {templates(site)[0].split("-")[0] for site in SITES} == set(SITES)
    ids = [t["id"] for t in suite]
    assert len(set(ids)) == len(ids)
    assert Counter(t["site"] for t in suite) == {site: SUITE_SIZE // len(SITES) for site in SITES}
    assert {name for name, _ in plan(SUITE_SIZE, SUITE_SEED)} == set(templates())
    for task in suite:
        parsed = WebTask.model_validate(task)
        assert parsed.gold and parsed.near_miss and task["gold"] != task["near_miss"], task["id"]
        assert len(parsed.gold) < parsed.limits.max_turns, task["id"]
        assert all("selector" in s.arguments or s.tool in ("goto", "answer") for s in parsed.gold), task["id"]
        assert task["fixture"]["seed"] == int(task["id"].rsplit("-", 1)[1])
        assert yaml.safe_load(dump(task)) == task


def test_the_bundled_suite_is_the_generators(suite):
    """Regenerate with: orchard tasks synth --family web --n 44 --seed 7 --out-dir tasks/data/web-mini"""
    on_disk = {p.parent.name: yaml.safe_load(p.read_text()) for p in SUITE.glob("*/task.yaml")}
    assert on_disk == {t["id"]: t for t in suite}


def test_state_checks_query_the_fixture_and_fail_there(suite, tmp_path):
    from orchard_cli.tasks.web.apps import WebApps

    apps = WebApps(tmp_path)
    apps.start()
    try:
        for task in suite:
            apps.reset(task["fixture"])
            states = [c for c in task["checks"] if c["kind"] == "state"]
            rows = {c["id"]: apps.query(c["site"], c["sql"]) for c in states}
            if states and all(c["kind"] == "state" for c in task["checks"]):
                assert any(rows[c["id"]] != c["expect"] for c in states), task["id"]
    finally:
        apps.stop()


def test_write_suite_writes_task_folders_and_the_cli_needs_a_folder(tmp_path):
    report = write_suite(tmp_path / "tasks", 4, 3)
    written = sorted(p.parent.name for p in (tmp_path / "tasks").glob("*/task.yaml"))
    assert written == sorted(report["ids"]) == sorted(t["id"] for t in generate(4, 3))
    assert report["sites"] == {site: 1 for site in SITES}
    missing = subprocess.run([sys.executable, "-m", "orchard_cli.main", "tasks", "synth", "--family", "web"],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "--out-dir" in missing.stderr
