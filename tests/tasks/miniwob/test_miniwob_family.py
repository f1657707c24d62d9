"""`orchard eval miniwob` end to end through the CLI: MiniWoB++'s own pages in the jailed browser,
its own reward read back. The reference steps of five tasks, through the action tools, reach
reward 1 (resolved); a null run does not, and its last page is in the HTML scorecard."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.chromium, pytest.mark.bwrap]
FIVE = "click-button,click-link,enter-text,click-checkboxes,click-dialog"


def orchard(tmp_path, *args):
    proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "COLUMNS": "120"})
    return proc


def test_five_tasks_resolve_with_their_reference_steps_and_fail_with_none(tmp_path):
    gold = orchard(tmp_path, "eval", "miniwob", "--predictions", "gold", "--instances", FIVE, "--out", "gold",
                   "--format", "json")
    assert gold.returncode == 0, gold.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "gold" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["instance_id"] for r in rows) == sorted(FIVE.split(","))
    assert all(r["resolved"] and r["steps"] >= 1 for r in rows), rows
    evidence = json.loads((tmp_path / "gold" / rows[0]["log_dir"] / "evidence.json").read_text())
    assert evidence["state"]["miniwob"]["raw_reward"] > 0 and evidence["state"]["started"]["utterance"]
    assert all(d["status"] == 200 for d in evidence["dispatches"])

    null = orchard(tmp_path, "eval", "miniwob", "--predictions", "empty", "--instances", "click-button,enter-text",
                   "--out", "null")
    assert null.returncode == 0, null.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "null" / "results.jsonl").read_text().splitlines()]
    assert [r["category"] for r in rows] == ["unresolved", "unresolved"]
    html = (tmp_path / "null" / "scorecard.html").read_text()
    for row in rows:
        assert row["screenshot"] and (tmp_path / "null" / row["screenshot"]).read_bytes()[:4] == b"\x89PNG"
        assert f"href='{row['screenshot']}'" in html  # the full page, beside the thumbnail inside the page
    assert html.count("src='data:image/jpeg;base64,") == len(rows)


def test_an_unknown_task_is_one_line_and_exit_2(tmp_path):
    proc = orchard(tmp_path, "eval", "miniwob", "--predictions", "gold", "--instances", "click-buton")
    assert proc.returncode == 2 and "click-buton" in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2
