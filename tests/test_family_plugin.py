"""A task family from a package orchard has never seen, registered by entry point only, runs
through `eval`, `eval regrade`, `distill` and `view` with no edit to the core: every command runs
as a subprocess of the installed CLI with the package on PYTHONPATH. The family is the example of
docs/families.md, read from there (the docs' example is what CI runs).

The family grades in place (its evidence is a file the agent writes, read before the sandbox is
destroyed) and declares a category of its own, so it also exercises the half of the seam SWE
does not use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchard_cli.models.scripted import ScriptedEndpoint

pytestmark = [pytest.mark.bwrap]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "families.md"


def docs_example(name: str) -> str:
    """The code block after `<!-- example: NAME -->` in docs/families.md."""
    text = DOCS.read_text()
    after = text.split(f"<!-- example: {name} -->", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


FAMILY = docs_example("echo")


def test_the_docs_new_family_is_under_40_lines():
    assert len(FAMILY.splitlines()) < 40, len(FAMILY.splitlines())


LEASED = docs_example("tally")


def test_the_docs_leased_family_is_under_80_lines():
    assert len(LEASED.splitlines()) < 80, len(LEASED.splitlines())


def install(root: Path, name: str, code: str, family: str) -> dict[str, str]:
    """The package `orchard_NAME` and its dist-info (an entry point in group orchard.tasks), on
    PYTHONPATH: the environment to run orchard in."""
    (root / f"orchard_{name}").mkdir(parents=True)
    (root / f"orchard_{name}" / "__init__.py").write_text(code)
    info = root / f"orchard_{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: orchard-{name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[orchard.tasks]\n{name} = orchard_{name}:{family}\n")
    return {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture
def plugin(tmp_path):
    return install(tmp_path / "site", "echo", FAMILY, "EchoFamily")


def orchard(env, *args, expect=0):
    proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == expect, f"orchard {' '.join(args)} -> {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc


def test_a_family_from_an_entry_point_runs_through_every_command(plugin, tmp_path):
    listed = json.loads(orchard(plugin, "tasks", "ls", "--format", "json").stdout)
    assert "echo" in listed["families"] and "echo" in [s["name"] for s in listed["suites"]]

    gold = tmp_path / "gold"
    card = json.loads(orchard(plugin, "eval", "echo", "--predictions", "gold", "--out", str(gold),
                              "--format", "json").stdout)
    assert (card["resolved"], card["total"], card["family"]) == (2, 2, "echo")
    assert "wrong_word" in card["by_category"] and card["categories"]["wrong_word"]["label"] == "wrong word"
    evidence = json.loads((gold / "logs/echo-1/attempt-1/evidence.json").read_text())
    assert evidence["files"] == {"answer.txt": "apple\n"} and evidence["patch"] is None
    assert not (gold / "predictions.jsonl").exists()  # not a patch family: no SWE-bench file
    assert "wrong word" in (gold / "scorecard.html").read_text()

    empty = json.loads(orchard(plugin, "eval", "echo", "--predictions", "empty", "--out", str(tmp_path / "empty"),
                               "--format", "json").stdout)
    assert (empty["resolved"], empty["by_category"]["unresolved"], empty["errors"]) == (0, 2, 0)

    regraded = json.loads(orchard(plugin, "eval", "regrade", str(gold), "--format", "json").stdout)
    assert regraded["resolved"] == 2 and regraded["changed"] == []

    # distill: a scripted teacher writes the right word for echo-1 and a wrong one for echo-2
    def write(word):
        return {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo {word} > answer.txt"}}]}

    out = tmp_path / "distill" / "t.jsonl"
    with ScriptedEndpoint([write("apple"), "done", write("pear"), "done"], dialects=("chat",)) as info:
        orchard(plugin, "distill", "echo", "--harness", "bash", "--base-url", info.base_url,
                "--teacher", "teacher", "--out", str(out), "--timeout", "120")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    verdicts = {r["task_id"]: r["outcome"]["category"] for r in rows}
    assert verdicts == {"echo-1": "resolved", "echo-2": "wrong_word"}, verdicts
    assert all(r["family"] == "echo" and r["schema_version"] == 2 for r in rows)
    assert {r["task_id"]: r["evidence"]["files"]["answer.txt"] for r in rows} == {"echo-1": "apple\n", "echo-2": "pear\n"}
    assert rows[0]["evidence"]["answer"] == "done"  # the agent's last words are evidence too

    page = Path(orchard(plugin, "view", str(out)).stdout.strip())  # the site's index.html; its data beside it
    html = "".join(p.read_text() for p in sorted(page.parent.rglob("*.js")))
    assert "wrong_word" in html and "#e2a03f" in html  # the family's own colour for its category
    assert "answer.txt" in html and "pear" in html


def test_the_docs_leased_family_runs_its_service_through_every_path(tmp_path):
    """The leased example: its host-side server answers the tools a gold solution calls and the
    bash agent calls through the recording proxy's gateway (`task-tool`); the near miss, one call
    short, is unresolved; the evidence carries the server's counters and the calls, so a regrade
    needs no server."""
    env = install(tmp_path / "site", "tally", LEASED, "TallyFamily")
    gold = tmp_path / "gold"
    card = json.loads(orchard(env, "eval", "tally", "--predictions", "gold", "--out", str(gold),
                              "--format", "json").stdout)
    assert (card["resolved"], card["total"], card["errors"]) == (2, 2, 0)
    evidence = json.loads((gold / "logs/tally-2/attempt-1/evidence.json").read_text())
    assert evidence["state"] == {"pears": 3, "other": 5}
    assert [d["tool"] for d in evidence["dispatches"]] == ["add_one"] * 3
    assert evidence["dispatches"][-1]["result"] == {"pears": 3, "other": 5}
    empty = json.loads(orchard(env, "eval", "tally", "--predictions", "empty", "--out", str(tmp_path / "empty"),
                               "--format", "json").stdout)
    assert (empty["resolved"], empty["errors"]) == (0, 0)
    regraded = json.loads(orchard(env, "eval", "regrade", str(gold), "--format", "json").stdout)
    assert regraded["resolved"] == 2 and regraded["changed"] == []
    for played, want in (("gold", 2), ("near-miss", 0)):
        out = tmp_path / f"agent-{played}"
        card = json.loads(orchard(env, "eval", "tally", "--model", played, "--base-url", played, "--harness", "bash",
                                  "--out", str(out), "--timeout", "120", "--format", "json").stdout)
        assert (card["resolved"], card["errors"]) == (want, 0), (played, card)
    evidence = json.loads((tmp_path / "agent-near-miss/logs/tally-2/attempt-1/evidence.json").read_text())
    assert evidence["state"] == {"pears": 2, "other": 5} and len(evidence["dispatches"]) == 2
