"""A Claw-Eval checkout read through the guarded loader (tasks/kit): the files a task names (its
sandbox files, and the paths its services' settings name, which resolve from the checkout root)
stay inside the task folder or the checkout; a link out, a `..`, a FIFO or a 2 GB file refuses the
checkout at load with one line naming the task and the path. The checker runs in the checkout's
own environment (helper.py loads tasks/kit/paths.py by its path), the placing in orchard."""

from __future__ import annotations

import os
import shutil
import time

import pytest
import yaml

from orchard_cli.env import connect
from orchard_cli.family import RunOptions
from orchard_cli.main import main
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.tasks.base import Gold, GoldCall
from orchard_cli.tasks.kit.taskfiles import TaskDataError
from orchard_cli.tasks.registry import load_suite
from orchard_cli.rollout.solvers import GoldSolver

CANARY = "ORCHARD-CANARY-c1a3e"


class Scripted(GoldSolver):
    name = harness = model = "scripted"

    def __init__(self, family, gold: Gold) -> None:
        super().__init__(family)
        self.gold = gold

    def replayed(self, context):
        return self.gold


@pytest.fixture
def checkout(mini, tmp_path):
    copy = tmp_path / "claw-eval"
    shutil.copytree(mini, copy)
    return copy


@pytest.fixture
def secret(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "secret.txt"
    path.write_text(CANARY + "\n")
    path.chmod(0o600)
    return path


def _edit(checkout, task, **fields):
    path = checkout / "tasks" / task / "task.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(fields)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _brief(checkout):
    return checkout / "tasks" / "T02_add_note" / "fixtures" / "brief.txt"


def _link_out(checkout, secret):
    _brief(checkout).unlink()
    _brief(checkout).symlink_to(secret)


def _fifo(checkout, secret):
    _brief(checkout).unlink()
    os.mkfifo(_brief(checkout))


def _sparse(checkout, secret):
    with open(_brief(checkout), "wb") as handle:
        handle.truncate(2 << 30)


def _folder_out(checkout, secret):
    fixtures = _brief(checkout).parent
    shutil.rmtree(fixtures)
    fixtures.symlink_to(secret.parent)
    (secret.parent / "brief.txt").write_text(CANARY)


def _dots(checkout, secret):
    _edit(checkout, "T02_add_note", sandbox_files=["../../../outside/secret.txt"])


def _service_setting(checkout, secret):
    notes = checkout / "tasks" / "T01_find_code" / "fixtures" / "notes.json"
    notes.unlink()
    notes.symlink_to(secret)


def _task_folder_out(checkout, secret):
    moved = secret.parent / "T05_elsewhere"
    shutil.copytree(checkout / "tasks" / "T01_find_code", moved)
    (checkout / "tasks" / "T05_elsewhere").symlink_to(moved)


@pytest.mark.parametrize("make, task, path, why", [
    (_link_out, "T02_add_note", "fixtures/brief.txt", "symbolic link"),
    (_folder_out, "T02_add_note", "fixtures/brief.txt", "symbolic link"),
    (_dots, "T02_add_note", "../../../outside/secret.txt", "'..'"),
    (_fifo, "T02_add_note", "fixtures/brief.txt", "FIFO"),
    (_sparse, "T02_add_note", "fixtures/brief.txt", "2,048 MiB"),
    (_service_setting, "T01_find_code", "tasks/T01_find_code/fixtures/notes.json", "symbolic link"),
    (_task_folder_out, "T05_elsewhere", "T05_elsewhere", "symbolic link"),
], ids=["file-link-out", "folder-link-out", "dots", "fifo", "sparse-2GB", "service-setting", "task-folder-out"])
def test_a_checkout_that_reaches_out_is_refused_at_load(checkout, secret, capsys, monkeypatch, make, task, path, why):
    make(checkout, secret)
    started = time.monotonic()
    with pytest.raises(TaskDataError) as caught:
        load_suite("claw-eval", dataset=str(checkout))
    assert time.monotonic() - started < 120
    message = caught.value.message
    assert message.startswith(f"task {task}: {path}: ") and why in message and "\n" not in message, message
    assert CANARY not in message
    if make is not _link_out:
        return  # the command line once: the refusal is the same error whatever it found
    monkeypatch.chdir(checkout.parent)
    code = main(["eval", "claw-eval", "--dataset", str(checkout), "--predictions", "gold",
                 "--out", str(checkout.parent / "run")])
    err = capsys.readouterr().err
    assert code == 2 and f"task {task}: {path}" in err and CANARY not in err, err
    assert not (checkout.parent / "run").exists(), "never a partial run"


def test_links_inside_the_task_folder_are_placed(checkout):
    real = _brief(checkout).with_name("brief-v2.txt")
    _brief(checkout).rename(real)
    _brief(checkout).symlink_to(real.name)
    family, tasks = load_suite("claw-eval", dataset=str(checkout), instances=["T02_add_note"])
    env = connect("local")
    try:
        gold = Gold(tool_calls=[GoldCall(tool="notes_add", arguments={
            "title": "Plumber visit", "body": "Thursday 10:00, bring the spare key."})], answer="Added.")
        result = run_episode(Episode(task=tasks[0], attempt=1, solver=Scripted(family, gold), episode_id="t02-1"),
                             family=family, env=env, options=RunOptions(backend="local"))
        assert result.outcome.category == "resolved", result.outcome
        assert "BRIEF_PRESENT" in str(result.evidence.state["env_snapshot"])
    finally:
        family.close()
        env.close()


# -- files named from the checkout's root, as Claw-Eval's runner finds them ----------------------
SHARED = "tasks/T02_add_note/fixtures/brief.txt"
SHARED_GRADER = """
from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class SharedFixtureGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        placed = (env_snapshot or {}).get("cmd:cat /workspace/SHARED", {}).get("stdout", "")
        after = (env_snapshot or {}).get("file:/workspace/tasks/T01_find_code/fixtures/notes.json", {})
        local = (env_snapshot or {}).get("local_file:fixtures/key.txt", {})
        checks = ["Thursday" in placed, "n2" in after.get("content", ""), "content" in local]
        return DimensionScores(completion=sum(checks) / len(checks), robustness=1.0)
""".replace("SHARED", SHARED)


def _shared_fixture_task(checkout, **extra):
    """T06: its workspace file and its after-the-agent file are other tasks' fixtures, named from
    the checkout's root (as Claw-Eval's T087-T092 name T021zh's and T027zh's)."""
    folder = checkout / "tasks" / "T06_shared_fixture"
    (folder / "fixtures").mkdir(parents=True)
    (folder / "fixtures" / "key.txt").write_text("a key only the grader reads\n")
    (folder / "grader.py").write_text(SHARED_GRADER)
    definition = {"task_id": "T06_shared_fixture", "task_name": "A fixture another task keeps",
                  "prompt": {"text": "Read the brief in your workspace."},
                  "sandbox_files": [SHARED], "sandbox_grader_files": ["tasks/T01_find_code/fixtures/notes.json"],
                  "local_grader_files": ["fixtures/key.txt"],
                  "env_snapshot_commands": [f"cat /workspace/{SHARED}"],
                  "env_snapshot_files": ["/workspace/tasks/T01_find_code/fixtures/notes.json"], **extra}
    (folder / "task.yaml").write_text(yaml.safe_dump(definition, sort_keys=False))


def test_a_file_named_from_the_checkout_root_is_placed_where_the_runner_places_it(checkout):
    """Claw-Eval's runner looks for a task's workspace files in its folder, then in the checkout's
    root, and puts them at the path as named (/workspace/tasks/...): the task runs, and its
    grader sees them there; local grader files stay in the task folder only, as the runner reads them."""
    _shared_fixture_task(checkout)
    family, tasks = load_suite("claw-eval", dataset=str(checkout), instances=["T06_shared_fixture"])
    env = connect("local")
    try:
        assert family.describe(tasks[0])["blocked"] is None
        result = run_episode(Episode(task=tasks[0], attempt=1, solver=Scripted(family, Gold(answer="Read.")),
                                     episode_id="shared-fixture"), family=family, env=env, options=RunOptions(backend="local"))
        assert result.outcome.category == "resolved", result.outcome
        assert "Files for this task are in /workspace: " + SHARED in family.episode(tasks[0], RunOptions()).prompt("/workspace")
    finally:
        family.close()
        env.close()
    _edit(checkout, "T06_shared_fixture", local_grader_files=["tasks/T01_find_code/fixtures/notes.json"])
    family, tasks = load_suite("claw-eval", dataset=str(checkout), instances=["T06_shared_fixture"])
    assert family.describe(tasks[0])["blocked"] == "needs_data: missing from the checkout: tasks/T01_find_code/fixtures/notes.json"
    family.close()
