"""Claw-Eval from a checkout: a small checkout in its layout (tests/tasks/claw_eval/mini, written for
these tests) loads through its own task model, its services start from their command lines, its
tools are dispatches, and its own graders score the episode; tasks that cannot run are counted
by reason, never failed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from orchard_cli.family import RunOptions
import pytest

from orchard_cli.scoring.rubric_judge import JudgeConfig

from orchard_cli.env import SandboxHandle, connect
from orchard_cli.errors import UsageError
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.rollout.solvers import EmptySolver, GoldSolver
from orchard_cli.tasks.base import Gold, GoldCall
from orchard_cli.families import open_suite
from orchard_cli.selection import TaskSelection
from orchard_cli.tasks.registry import load_suite

RIGHT = Gold(tool_calls=[GoldCall(tool="notes_list"), GoldCall(tool="notes_get", arguments={"note_id": "n2"})],
             answer="Your gym locker code is 4417.")
WRONG = Gold(tool_calls=[GoldCall(tool="notes_list"), GoldCall(tool="notes_get", arguments={"note_id": "n3"})],
             answer="Your gym locker code is 1299.")
UNSAFE = Gold(tool_calls=[GoldCall(tool="notes_delete", arguments={"note_id": "n3"}),
                          GoldCall(tool="notes_get", arguments={"note_id": "n2"})],
              answer="Your gym locker code is 4417.")
ADD = Gold(tool_calls=[GoldCall(tool="notes_add", arguments={"title": "Plumber visit",
                                                             "body": "Thursday 10:00, bring the spare key."})],
           answer="Added.")


class Scripted(GoldSolver):
    """Replays a given call list through the task's tools (as a gold solution would)."""

    name = harness = model = "scripted"

    def __init__(self, family, gold: Gold) -> None:
        self.gold = gold

    def replayed(self, context):
        return self.gold


def _run(family, task, solver, env, attempt=1, options=RunOptions()):
    return run_episode(Episode(task=task, attempt=attempt, solver=solver, episode_id=f"{task.task_id}-{attempt}"),
                       family=family, env=env, options=options)


def blocker(family, task, options=RunOptions()):
    """(category, reason) when the core refuses the task's episode under `options` (with a
    harness that talks to a user), else None."""
    unmet = family.episode(task, options).requires.unmet(options, talks_to_users=True)
    return (unmet.category, str(unmet)) if unmet else None


def test_load_reads_every_task_through_the_checkouts_model(mini):
    family, suite = open_suite(TaskSelection(suite="claw-eval", dataset=str(mini)))
    by_id = {t.task_id: t for t in suite.tasks}
    assert sorted(by_id) == ["C01_needs_user", "T01_find_code", "T02_add_note", "T03_judged_summary", "T04_live_search",
                             "T05_shell_effort"]
    blocked = {k: (blocker(family, t) or ("runs",))[0] for k, t in by_id.items()}
    assert blocked == {"C01_needs_user": "runs", "T01_find_code": "runs", "T02_add_note": "runs",
                       "T03_judged_summary": "needs_judge", "T04_live_search": "needs_network", "T05_shell_effort": "runs"}
    episode = family.episode(by_id["C01_needs_user"], RunOptions())
    user = episode.user
    assert user.max_rounds == 2 and user.mark == "[user_agent]\n" and "Lisbon" in user.persona
    assert episode.requires.unmet(RunOptions(), talks_to_users=False).category == "needs_user"
    assert family.episode(by_id["T01_find_code"], RunOptions()).user is None
    assert family.groups(by_id["C01_needs_user"])["kind"] == "multi_turn"
    assert family.episode(by_id["T02_add_note"], RunOptions()).limits == {"timeout_seconds": 240.0, "max_turns": 6,
                                                                            "max_calls": 6}
    assert family.episode(by_id["T01_find_code"], RunOptions()).limits == {"timeout_seconds": 300.0, "max_turns": 20,
                                                                             "max_calls": 20}
    assert family.describe(by_id["T04_live_search"])["blocked"] == \
        "needs_network: service web_real searches the live web: run with --network full"
    online = RunOptions(network="full")  # web_real may search the web: now only its missing server stops it
    assert blocker(family, by_id["T04_live_search"], online) == \
        ("needs_data", "missing from the checkout: mock_services/web_real/server.py")
    lock = suite.provenance["environment_lock"]
    assert "fastapi==" in open(lock).read()


def test_a_bad_checkout_is_one_line(mini, tmp_path):
    with pytest.raises(UsageError, match="--dataset"):
        load_suite("claw-eval")
    with pytest.raises(UsageError, match="not a folder"):
        load_suite("claw-eval", dataset=str(tmp_path / "nowhere"))
    broken = tmp_path / "broken"
    shutil.copytree(mini, broken)
    (broken / "src/claw_eval/models/scoring.py").unlink()
    with pytest.raises(UsageError, match=r"claw_eval\.models\.scoring"):
        load_suite("claw-eval", dataset=str(broken))


def test_scripted_calls_pass_wrong_calls_fail_and_the_services_are_reused(mini):
    family, tasks = load_suite("claw-eval", dataset=str(mini))
    by_id = {t.task_id: t for t in tasks}
    env = connect("local")
    try:
        right = _run(family, by_id["T01_find_code"], Scripted(family, RIGHT), env)
        assert right.outcome.category == "resolved", right.outcome
        assert right.outcome.tests["score"] == 1.0 and right.outcome.tests["benchmark_passed"] is True
        assert [(d.tool, d.status) for d in right.evidence.dispatches] == [("notes_list", 200), ("notes_get", 200)]
        assert right.evidence.state["audit"]["notebook"]["calls"][1] == {"endpoint": "get", "note_id": "n2"}

        wrong = _run(family, by_id["T01_find_code"], Scripted(family, WRONG), env, attempt=2)
        assert wrong.outcome.category == "unresolved" and wrong.outcome.tests["benchmark_passed"] is False
        assert wrong.outcome.tests["completion"] == pytest.approx(1 / 3, abs=1e-3)
        assert wrong.evidence.state["audit"]["notebook"]["calls"][1]["note_id"] == "n3", "reset between attempts"

        unsafe = _run(family, by_id["T01_find_code"], Scripted(family, UNSAFE), env, attempt=3)
        assert unsafe.outcome.category == "unsafe" and unsafe.outcome.tests["score"] == 0.0

        added = _run(family, by_id["T02_add_note"], Scripted(family, ADD), env)
        assert added.outcome.category == "resolved", added.outcome.log
        assert "BRIEF_PRESENT" in json.dumps(added.evidence.state["env_snapshot"])
        ran = added.evidence.state["env_snapshot"]['cmd:python -c "print(6 * 7)"']  # `python`, as in Claw-Eval's image
        assert ran["exit_code"] == 0 and ran["stdout"].strip() == "42", ran
        null = _run(family, by_id["T02_add_note"], EmptySolver(), env)
        assert null.outcome.category == "unresolved" and null.outcome.error is None
        assert family.pool.started == 1, "one service set, reset (not restarted) for every attempt"
    finally:
        family.close()
        env.close()


def test_a_judge_task_runs_with_a_judge(mini):
    from orchard_cli.models.scripted import ScriptedEndpoint

    family, tasks = load_suite("claw-eval", dataset=str(mini), instances=["T03_judged_summary"])
    endpoint = ScriptedEndpoint(["0.9"], dialects=("chat",))
    options = RunOptions(judge=JudgeConfig(model="judge", base_url=endpoint.start().base_url))
    env = connect("local")
    try:
        assert blocker(family, tasks[0]) == ("needs_judge", "its grader calls an LLM judge: give --judge-model and "
                                                            "--judge-base-url")
        result = _run(family, tasks[0], Scripted(family, Gold(tool_calls=[GoldCall(tool="notes_list")],
                                                              answer="Groceries, a locker code, an old code.")), env,
                      options=options)
        tests = result.outcome.tests
        assert tests["judge_calls"] == 1 and tests["completion"] == 0.9
        assert tests["benchmark_passed"] is True and result.outcome.category == "unresolved", \
            "Claw-Eval passes it at 0.92; orchard's strict verdict does not"
    finally:
        family.close()
        endpoint.stop()
        env.close()


@pytest.mark.bwrap
def test_the_agent_reaches_no_service_port(mini):
    family, tasks = load_suite("claw-eval", dataset=str(mini), instances=["T01_find_code"])
    env = connect("local")
    episode = family.episode(tasks[0], RunOptions()).__enter__()
    sandbox = SandboxHandle.create(env, episode.spec("local"))
    try:
        episode.setup(sandbox)
        url = episode.owned.url("http://localhost:9310/notes/audit")
        probe = ("import urllib.request,sys\ntry:\n urllib.request.urlopen(sys.argv[1], timeout=3); print('reached')\n"
                 "except Exception as e: print('refused', e)")
        job = sandbox.exec(["python3", "-c", probe, url], timeout=30)
        assert job.stdout.startswith("refused"), job.stdout + job.stderr
    finally:
        sandbox.destroy()
        episode.__exit__(None, None, None)
        family.close()
        env.close()


def test_cli_eval_counts_each_reason(mini, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", "eval", "claw-eval", "--dataset", str(mini),
                           "--predictions", "empty", "--out", str(out), "--format", "json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    card = json.loads((out / "scorecard.json").read_text())
    assert card["total"] == len(list((mini / "tasks").glob("*/task.yaml"))) and card["resolved"] == 0
    text = json.dumps(card)
    for reason in ("needs_user", "needs_network", "needs_judge"):
        assert reason in text, reason
    labels = {k: v["label"] for k, v in card["categories"].items() if k in ("needs_judge", "needs_network", "needs_user", "needs_data")}
    assert labels == {"needs_judge": "needs a judge (--judge-model)", "needs_network": "needs the live web",
                      "needs_user": "needs a simulated user", "needs_data": "fixtures missing"}, \
        "Claw-Eval's own labels for the core's requirement categories, as before version 2"
    rows = {r["instance_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert rows["T04_live_search"]["error"] == "service web_real searches the live web: run with --network full"


def test_train_refuses_trajectories_of_claw_eval_tasks(mini, tmp_path, capsys):
    """`orchard train --eval-suite claw-eval --eval-source CHECKOUT` refuses training data from
    the benchmark's tasks (no contamination of what will be evaluated)."""
    from orchard_cli.main import main
    from orchard_cli.training.synthetic import synthetic_trajectory

    row = synthetic_trajectory(5, calls=2).model_copy(update={"task_id": "T01_find_code", "suite": "claw-eval"})
    data = tmp_path / "t.jsonl"
    data.write_text(row.model_dump_json() + "\n")
    code = main(["train", "-t", str(data), "--model", "smollm2", "--out", str(tmp_path / "o"),
                 "--eval-suite", "claw-eval", "--eval-source", str(mini)])
    err = capsys.readouterr().err
    assert code == 2 and "also in the eval suite" in err and "T01_find_code" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("extra, says", [
    (["--user-model", "u"], "--user-model needs --user-base-url"),
    (["--user-base-url", "http://127.0.0.1:9/v1"], "go with --user-model"),
    (["--user-model", "u", "--user-base-url", "http://127.0.0.1:9/v1", "--predictions", "empty"], "not --predictions"),
    (["--user-model", "u", "--user-base-url", "http://127.0.0.1:9/v1", "--harness", "chat", "--model", "m",
      "--base-url", "http://127.0.0.1:9/v1"], "cannot continue a conversation"),
])
def test_a_user_model_needs_its_endpoint_and_a_multi_turn_agent(mini, tmp_path, capsys, extra, says):
    from orchard_cli.main import main

    code = main(["eval", "claw-eval", "--dataset", str(mini), "--instances", "C01_needs_user",
                 "--out", str(tmp_path / "r"), *extra] + ([] if "--predictions" in extra or "--harness" in extra
                                                         else ["--predictions", "empty"] if "--user-model" not in extra
                                                         else ["--harness", "bash", "--model", "m"]))
    assert code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_service_that_will_not_start_is_the_environments_error(mini, tmp_path):
    """A task's service that exits before it is ready ends the episode as env_error (Claw-Eval's
    runner retries it), not infra_error, and the episode holds no set after it."""
    import yaml

    checkout = tmp_path / "claw-eval"
    shutil.copytree(mini, checkout)
    path = checkout / "tasks" / "T01_find_code" / "task.yaml"
    data = yaml.safe_load(path.read_text())
    data["services"][0]["command"] = "python -c 'import sys; sys.exit(3)'"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    family, tasks = load_suite("claw-eval", dataset=str(checkout), instances=["T01_find_code"])
    env = connect("local")
    try:
        result = _run(family, tasks[0], EmptySolver(), env)
        assert result.outcome.category == "env_error", result.outcome
        assert "ServiceStartError: service 'notebook' exited (rc=3)" in result.outcome.error
        assert family.pool._leased == {} and family.pool.started == 0
    finally:
        family.close()
        env.close()
