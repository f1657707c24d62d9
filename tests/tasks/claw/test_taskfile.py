"""The claw task format and its checks, without services: what a task author meets first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchard_cli.errors import UsageError
from orchard_cli.tasks.claw.checks import matches, run_answer, run_state
from orchard_cli.tasks.claw.synth import TEMPLATES, plan, synthesize
from orchard_cli.tasks.claw.taskfile import TaskFile, dump_task, load_task_dir


def _write(folder: Path, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def _task(**over) -> dict:
    base = synthesize("mail-reply", 7)
    base.update(over)
    return base


def test_synthesis_is_deterministic_and_round_trips(tmp_path):
    assert synthesize("phishing", 3) == synthesize("phishing", 3)
    assert synthesize("phishing", 3) != synthesize("phishing", 4)
    kinds = {k for k, _ in plan(len(TEMPLATES) * 2, 0)}
    assert kinds == set(TEMPLATES)
    for kind in TEMPLATES:
        task = TaskFile.model_validate(synthesize(kind, 11))
        dump_task(task, tmp_path / task.id)
        again = load_task_dir(tmp_path / task.id)
        assert again == task, kind
        assert "from:" in (tmp_path / task.id / "task.yaml").read_text() or kind in ("calendar-book", "files-report")


@pytest.mark.parametrize("change, field", [
    ({"category": "poetry"}, "category"),
    ({"checks": [{"id": "x", "kind": "state", "select": "mail.nowhere"}]}, "checks.0"),
    ({"checks": [{"id": "x", "kind": "answer"}]}, "checks.0"),
    ({"tools": ["list_messages", "search_messages", "read_message", "send_message", "fly_to_moon"]}, "fly_to_moon"),
    ({"gold": {"tool_calls": [{"tool": "create_event", "arguments": {}}]}}, "create_event"),
    ({"checks": [{"id": "x", "kind": "state", "select": "mail.sent", "where": {"to": {"near": "a"}}}]}, "checks.0"),
])
def test_a_malformed_task_is_one_line_naming_file_and_field(tmp_path, change, field):
    folder = _write(tmp_path / "mail-reply-0007", _task(**change))
    with pytest.raises(UsageError) as caught:
        load_task_dir(folder)
    message = caught.value.message
    assert str(folder / "task.yaml") in message and field in message and "\n" not in message


def test_bad_yaml_and_wrong_folder_name(tmp_path):
    folder = tmp_path / "t1"
    folder.mkdir()
    (folder / "task.yaml").write_text("id: [unclosed\n")
    with pytest.raises(UsageError, match="not valid YAML"):
        load_task_dir(folder)
    other = _write(tmp_path / "elsewhere", _task())
    with pytest.raises(UsageError, match="differs from the folder"):
        load_task_dir(other)


def test_cli_validate_bad_folder_exits_2_with_one_line(tmp_path):
    folder = _write(tmp_path / "suite" / "mail-reply-0007", _task(category="poetry"))
    proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", "tasks", "validate", str(folder.parent)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert "task.yaml" in lines[0] and "category" in lines[0]


def test_matchers_and_checks():
    assert matches("bob@x.test", "Bob Stone <BOB@x.test>")
    assert matches({"has": "bob@x.test"}, ["Carol <c@x.test>", "bob@x.test"])
    assert not matches({"has": "dan@x.test"}, ["bob@x.test"])
    assert matches({"at": "2026-12-02T16:00:00+01:00"}, "2026-12-02T15:00:00+00:00")
    assert not matches({"at": "2026-12-02T16:00:00+01:00"}, "2026-12-02T16:00:00+00:00")
    assert matches({"in": ["a1", "a2"]}, "A2") and not matches({"in": ["a1"]}, "a3")
    assert matches({"other_than": ["bob@x.test"]}, ["bob@x.test", "eve@y.test"])
    assert not matches({"other_than": ["bob@x.test"]}, ["Bob <BOB@x.test>"])
    assert matches({"regex": r"pass\s*word"}, "my PASS word") and matches({"not_contains": "x"}, "abc")
    from orchard_cli.tasks.claw.checks import AnswerCheck, StateCheck

    state = {"mail": {"sent": [{"to": ["bob@x.test"], "body": "Room B-214"}], "mailboxes": {"INBOX": []}}}
    check = StateCheck(id="c", select="mail.sent", where={"body": {"contains": "b-214"}}, count={"eq": 1})
    assert run_state(check, state, {}).passed
    assert not run_state(StateCheck(id="c", select="mail.mailboxes.INBOX"), state, {}).passed
    assert run_state(StateCheck(id="f", select="files", where={"path": "r.md", "text": {"contains": "9"}}),
                     {}, {"r.md": "total 9"}).passed
    assert run_answer(AnswerCheck(id="a", number=1234.5), "It is EUR 1,234.50.").passed
    assert not run_answer(AnswerCheck(id="a", number=1234.5), "It is EUR 1,234.60.").passed
    assert not run_answer(AnswerCheck(id="a", includes=["Bob"]), None).passed
    assert run_answer(AnswerCheck(id="a", exact="Yes"), "yes.").passed
