"""`orchard distill --base-url gold`: each task's reference played as the model's turns through the
real harness, recorded and graded as a teacher's would be. Every demonstration resolves, in the
harness's own format: `task-tool` command lines (orchard's bash agent), MCP tool calls (Codex),
BrowserGym actions with the page's ids (orchard's web agent, web-mini and MiniWoB), a patch as a
shell command (calc), the answer alone (quiz, the chat harness). A task without a reference is
refused by name before anything runs."""

from __future__ import annotations

import json
import os
import re

import pytest

from orchard_cli.main import main
from orchard_cli.trajectory import read_trajectories


def _distill(tmp_path, capsys, suite: str, harness: str, *extra: str) -> list:
    out = tmp_path / f"{suite}-{harness}.jsonl"
    code = main(["distill", suite, "--base-url", "gold", "--harness", harness, *extra,
                 "--out", str(out), "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    summary = json.loads(captured.out)
    records = read_trajectories(out)
    assert summary["resolved"] == summary["planned"] == len(records), [(r.task_id, r.errors) for r in records]
    assert all(r.model == "gold" and r.outcome.resolved and not r.errors for r in records)
    return records


def _calls(record) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for m in record.messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]


def _actions(record) -> list[str]:
    """The web agent's replies, one per call (each call is a prompt of its own)."""
    return [c.response["choices"][0]["message"]["content"] for c in record.calls]


@pytest.mark.bwrap
def test_bash_agent_plays_claw_references_as_task_tool_lines(tmp_path, capsys):
    (record,) = _distill(tmp_path, capsys, "claw-mini", "bash", "--instances", "mail-reply-1005")
    commands = [args["command"] for name, args in _calls(record)]
    assert [c.split()[:2] for c in commands] == [["task-tool", "search_messages"], ["task-tool", "read_message"],
                                                 ["task-tool", "send_message"]]
    assert record.messages[-1]["content"].startswith("Replied:")  # the answer ends the episode
    assert [d.tool for d in record.evidence.dispatches] == ["search_messages", "read_message", "send_message"]


@pytest.mark.bwrap
def test_patches_and_answers_in_the_shell_and_chat_harnesses(tmp_path, capsys):
    calc = _distill(tmp_path, capsys, "calc", "bash")
    assert len(calc) == 4 and all(_calls(r)[0][1]["command"].startswith("git apply") for r in calc)
    (quiz,) = _distill(tmp_path, capsys, "capitals", "chat", "--limit", "1")
    assert [m["role"] for m in quiz.messages][-1] == "assistant" and not _calls(quiz)


@pytest.mark.chromium
@pytest.mark.bwrap
@pytest.mark.slow
def test_web_agent_plays_selector_steps_with_the_pages_ids(tmp_path, capsys):
    web = _distill(tmp_path, capsys, "web-mini", "web", "--instances", "shop-attribute-7000,wiki-fact-7005")
    for record in web:
        actions = _actions(record)
        assert actions[-1].startswith("answer(") and all("selector" not in a for a in actions)
        assert any(re.match(r'(click|fill)\("(f\d+)?e\d+"', a) for a in actions), actions
    miniwob = _distill(tmp_path, capsys, "miniwob", "web", "--instances", "click-link,enter-text")
    link = next(r for r in miniwob if r.task_id == "click-link")
    assert any(a.startswith("mouse_click(") for a in _actions(link)), _actions(link)


@pytest.mark.harness
@pytest.mark.bwrap
@pytest.mark.slow
def test_codex_gets_the_task_tools_over_mcp(tmp_path, capsys):
    from orchard_cli.harnesses import load_harness

    problems = load_harness("codex").check()
    if problems:
        if os.environ.get("ORCHARD_TEST_STRICT") == "1":
            pytest.fail(f"prerequisite missing under ORCHARD_TEST_STRICT=1: {problems[0]}")
        pytest.skip(f"codex is not installed: {problems[0]}")
    (record,) = _distill(tmp_path, capsys, "claw-mini", "codex", "--instances", "mail-search-1006")
    assert [name for name, _ in _calls(record)] == ["mcp__task__search_messages"]
    assert all(c.endpoint == "responses" for c in record.calls)


def test_a_task_without_a_reference_is_refused_by_name(tmp_path, capsys):
    code = main(["distill", "miniwob", "--instances", "book-flight,click-button", "--base-url", "gold",
                 "--harness", "web", "--out", str(tmp_path / "x.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "book-flight" in err and len(err.strip().splitlines()) <= 2
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.bwrap
def test_the_near_miss_demonstrator_plays_each_tasks_near_miss(tmp_path, capsys):
    """`--base-url near-miss`: the same demonstrator playing the family's near miss (mail-lookup's is
    the answer without the tools, and the other month's total): recorded like gold's, graded as
    the near miss it is (unresolved), and kept in the output (the near-miss control trains on it)."""
    out = tmp_path / "near.jsonl"
    code = main(["distill", "claw-mini", "--instances", "mail-lookup-1004", "--base-url", "near-miss",
                 "--harness", "bash", "--out", str(out), "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    (record,) = read_trajectories(out)
    assert record.model == "near-miss" and not record.errors
    assert not record.outcome.resolved and record.outcome.category == "unresolved"
    assert record.evidence.dispatches == [] and "The invoice from" in record.messages[-1]["content"]
    assert [m["role"] for m in record.messages][-1] == "assistant" and record.calls
    # a family without near misses (calc's patches) is refused by name before anything runs
    code = main(["distill", "calc", "--base-url", "near-miss", "--harness", "bash",
                 "--out", str(tmp_path / "calc.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "near miss" in err and "calc-" in err, err
    assert not (tmp_path / "calc.jsonl").exists()
