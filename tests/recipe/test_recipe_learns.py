"""`orchard recipe claw`, small enough for CI, must learn: one template (mail-search), 12 gold
demonstrations through orchard's bash agent, 12 steps of SFT on the embedded SmolLM2 (CPU, seeded),
greedy evaluation on 4 held-out seeds. The student resolves at least 2 of them where the base
resolves none, read from the eval runs' own scorecards.

One trained student (a session fixture) serves every test here, made through the public command
line in three runs of `orchard recipe`: Ctrl-C once the student has finished two held-out episodes
(exit 130), `--resume` to the end, and `--resume` again (every finished stage skipped).
Quiet, the whole fixture takes ~4-5 minutes on 2 cores; every wait is bounded several times over.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchard_cli.records import read_json, read_jsonl

pytestmark = [pytest.mark.model, pytest.mark.bwrap, pytest.mark.slow]

STAGES = ["synth", "distill", "student", "eval-teacher", "eval-base", "eval-student"]
ARGS = ["recipe", "claw", "--harness", "bash", "--teacher", "gold", "--student", "smollm2",
        "--templates", "mail-search", "--n", "12", "--seed", "11", "--heldout-n", "4", "--heldout-seed", "12",
        "--steps", "12", "--lr", "5e-5", "--train-seed", "0", "--max-turns", "3", "--max-new-tokens", "64",
        "--timeout", "180", "--device", "cpu"]
LIMIT = 1800.0
"""Seconds any one run of the recipe may take (quiet: ~5 minutes for all three)."""
STOP_AT = re.compile(r"^  SFT on held-out seeds: \S+ \w+ \(\d+/2 resolved, 2 to go\)$")
"""The student's second held-out episode is finished: the moment to press Ctrl-C."""


def _orchard(home: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "ORCHARD_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "orchard_cli.main", *args], env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _interrupted(home: Path, out: Path) -> tuple[int, list[str]]:
    """The first run, interrupted with SIGINT once STOP_AT is printed; (exit code, stderr lines)."""
    proc = _orchard(home, *ARGS, "--out", str(out))
    watchdog = threading.Timer(LIMIT, proc.kill)
    watchdog.start()
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if STOP_AT.match(lines[-1]):
                proc.send_signal(signal.SIGINT)
                break
        proc.communicate(timeout=120)
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    return proc.returncode, lines


def _resumed(home: Path, out: Path) -> tuple[dict, list[str], float]:
    """`--resume --format json` to the end: (the report's data, stderr lines, seconds)."""
    clock = time.monotonic()
    proc = _orchard(home, *ARGS, "--out", str(out), "--resume", "--format", "json")
    try:
        stdout, stderr = proc.communicate(timeout=LIMIT)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    return json.loads(stdout), stderr.splitlines(), time.monotonic() - clock


@pytest.fixture(scope="session")
def trained(tmp_path_factory, smollm2_home):
    """The small recipe, run to the end in three sessions of the CLI."""
    out = tmp_path_factory.mktemp("recipe") / "run"
    code, first = _interrupted(smollm2_home, out)
    data, second, _ = _resumed(smollm2_home, out)
    again, third, skipped_in = _resumed(smollm2_home, out)
    return {"out": out, "code": code, "data": data, "again": again, "sessions": [first, second, third],
            "skipped_in": skipped_in}


def _rate(out: Path, run: str) -> tuple[int, int]:
    card = read_json(out / "eval" / run / "scorecard.json")
    return card["resolved"], card["total"]


def test_the_student_learns_where_the_base_does_not(trained):
    out = trained["out"]
    assert _rate(out, "base-heldout") == (0, 4)
    resolved, total = _rate(out, "student-heldout")
    assert total == 4 and resolved >= 2, "the student resolves at least 2 of 4 held-out seeds"
    assert _rate(out, "teacher-heldout") == (4, 4)  # gold, the ceiling
    test = trained["data"]["tests"]["base->student:heldout"]
    assert test["only_first"] == 0 and test["only_second"] == resolved
    # what it learned is the demonstrations' behaviour, not their words: search with the task's
    # topic, then answer with a name the search showed, which no demonstration's answer holds
    def said(row: dict, i: int) -> dict:
        return row["calls"][i]["response"]["choices"][0]["message"]

    demos, _ = read_jsonl(out / "distill" / "demos.jsonl")
    taught = {said(d, -1)["content"] for d in demos}
    rows, _ = read_jsonl(out / "eval" / "student-heldout" / "trajectories.jsonl")
    for row in (r for r in rows if r["outcome"]["resolved"]):
        assert "task-tool search_messages" in said(row, 0)["tool_calls"][0]["function"]["arguments"]
        assert said(row, -1)["content"] not in taught

def test_every_stage_ran_once_and_printed_its_command(trained):
    records = {name: read_json(trained["out"] / "stages" / f"{name}.json") for name in STAGES}
    assert all(r["status"] == "finished" for r in records.values())
    firsts = {name: r["commands"][0].split()[:2] for name, r in records.items()}
    assert firsts == {"synth": ["orchard", "tasks"], "distill": ["orchard", "distill"], "student": ["orchard", "train"],
                      "eval-teacher": ["orchard", "eval"], "eval-base": ["orchard", "serve"],
                      "eval-student": ["orchard", "serve"]}
    assert "--base-url gold" in records["distill"]["commands"][0]
    assert "--eval-suite" in records["student"]["commands"][0]  # the contamination guard is on
    demos = [json.loads(line) for line in (trained["out"] / "distill" / "demos.jsonl").read_text().splitlines()]
    assert len(demos) == 12 and all(d["outcome"]["resolved"] and d["model"] == "gold" for d in demos)
    student = records["student"]["result"]
    assert student["steps"] == 12 and student["truncated"] == 0 and student["final_loss"] < student["first_loss"]


def test_ctrl_c_stops_a_stage_and_resume_continues_where_it_stopped(trained):
    first, second, _ = trained["sessions"]
    assert trained["code"] == 130, first[-5:]
    assert "[eval-student] running" in first and not any("[eval-student] finished" in line for line in first)
    assert "[eval-student] continuing" in second
    for name in STAGES[:-1]:
        assert f"[{name}] done earlier" in " ".join(second), name
    resumed = [line for line in second if line.startswith("  SFT on held-out seeds: mail-search")]
    assert len(resumed) == 2, "only the two episodes the interruption left are run"
    rows, _ = read_jsonl(trained["out"] / "eval" / "student-heldout" / "results.jsonl")
    assert sorted(r["instance_id"] for r in rows) == [f"mail-search-{12000 + i}" for i in range(4)]


def test_a_finished_recipe_runs_again_in_seconds(trained):
    third = trained["sessions"][2]
    assert all(f"[{name}] done earlier" in " ".join(third) for name in STAGES)
    assert trained["skipped_in"] < 120
    assert trained["again"]["arms"] == trained["data"]["arms"]


def test_the_report(trained):
    out = trained["out"]
    text = (out / "report.md").read_text()
    assert "McNemar" in text and "greedy" in text and "replies capped at 64 tokens" in text
    assert "orchard distill" in text and (out / "report.html").read_text().startswith("<!doctype html>")
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = read_json(out / "report.json")
    assert set(data["arms"]) == {"teacher", "base", "student"}
    assert data["decoding"]["temperature"] == 0
