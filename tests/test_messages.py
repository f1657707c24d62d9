"""Messages that say what is true and what to do next: one test per message a new user was misled
by (issue 35, item 8). Real suites, real run folders; the CLI in-process unless the test is about
what a pipe receives."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchard_cli.main import main


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_misspelt_gold_is_a_missing_file_with_a_suggestion(capsys, tmp_path):
    code, _, err = _cli(capsys, "eval", "claw-mini", "--predictions", "golden", "--out", str(tmp_path / "r"))
    assert code == 2
    assert "error: --predictions golden: no such file (did you mean gold?)" in err  # not "not graded on a patch"
    assert not (tmp_path / "r").exists()


def test_a_misspelt_suite_gets_a_suggestion(capsys):
    code, _, err = _cli(capsys, "eval", "claw-mni", "--predictions", "gold")
    assert code == 2 and "unknown suite 'claw-mni' (did you mean claw-mini?)" in err
    code, _, err = _cli(capsys, "eval", "claw-mini", "--harness", "bsh", "--model", "smollm2")
    assert code == 2 and "unknown harness 'bsh' (did you mean bash?)" in err


def test_gold_on_tasks_without_references_names_those_with_one(capsys):
    code, _, err = _cli(capsys, "eval", "miniwob", "--predictions", "gold", "--limit", "3")
    assert code == 2
    assert "none of the 3 selected miniwob task(s) has a gold solution" in err
    assert "6 of the suite's tasks have one: click-button, click-checkboxes, click-dialog, click-link, enter-text, focus-text" in err
    assert "hint: --instances click-button,click-checkboxes,click-dialog,click-link,enter-text,focus-text" in err


def _run_folder(path, tasks, results):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"schema_version": 1, "suite": tasks[0]["suite"], "source": "gold"}))
    (path / "tasks.jsonl").write_text("".join(json.dumps({"schema_version": 1, "problem_statement": "...", **t}) + "\n"
                                              for t in tasks))
    (path / "results.jsonl").write_text("".join(json.dumps({"schema_version": 1, **r}) + "\n" for r in results))
    return path


def test_judging_a_run_that_is_not_web_is_refused(capsys, tmp_path):
    run = _run_folder(tmp_path / "claw", [{"task_id": "mail-1", "suite": "claw-mini", "family": "claw"}],
                      [{"instance_id": "mail-1", "attempt": 1, "category": "resolved", "resolved": True}])
    code, _, err = _cli(capsys, "judge", str(run), "--judge-model", "j", "--judge-base-url", "http://127.0.0.1:9/v1")
    assert code == 2 and f"error: {run} is not a web run (its tasks are claw tasks)" in err


def test_compare_never_shows_a_collapsed_interval(capsys, tmp_path):
    tasks = [{"task_id": f"t{i}", "suite": "calc", "family": "calc"} for i in range(3)]
    a = _run_folder(tmp_path / "a", tasks, [{"instance_id": f"t{i}", "attempt": 1, "category": "resolved",
                                              "resolved": True} for i in range(3)])
    b = _run_folder(tmp_path / "b", tasks, [{"instance_id": f"t{i}", "attempt": 1, "category": "unresolved",
                                              "resolved": False} for i in range(3)])
    code, out, _ = _cli(capsys, "eval", "compare", str(a), str(b))
    assert code == 0
    assert "95% CI [-100.0, -100.0]" not in out
    assert "B - A: -100.0 points, 95% CI not shown (every paired instance moved the same way" in out
    assert "McNemar exact p = 0.25" in out


def test_rl_on_a_rollouts_file_says_what_the_file_holds(tmp_path):
    from orchard_cli.commands.rl import plan_text
    from orchard_cli.rl.samples import Rollout
    from orchard_cli.rl.rollouts import read_rollouts

    path = tmp_path / "r.jsonl"
    rows = [Rollout(episode_id=f"e{t}{k}", uid=f"t{t}", suite="capitals", task_id=f"t{t}", attempt=k, policy="smollm2",
                    harness="chat", category="resolved", resolved=True, reward=1.0, reward_kind="resolved")
            for t in range(2) for k in (1, 2)]
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    groups: dict[str, list] = {}
    for r in read_rollouts(path):
        groups.setdefault(r.uid, []).append(r)
    text = plan_text(None, 0, list(groups.values()), path, steps=20, tasks_per_step=4, group_size=4, harness="chat")
    assert "4 task(s)" not in text and "G=4" not in text  # what the options say, not the file
    assert f"4 rollouts from {path} (2 group(s), G=2): 20 step(s) x 2 group(s)" in text
    assert "each is trained on about 20 times (offline GRPO: no new rollouts)" in text


def test_rerank_says_what_it_dropped_and_names_actions_for_claw(capsys, tmp_path):
    from orchard_cli.commands.rerank import render_report
    from orchard_cli.commands._common import OutputFormat
    from orchard_cli.value.apply import RerankReport, labels, markdown_section

    report = RerankReport(value_model="v", runs=["a"], suite="claw-mini", tasks=2, candidates=6, filtered_out=2,
                          patches=False, strategies={"first": 0.5, "random": 1.0, "majority": 1.0, "shortest": 1.0,
                                                      "value": 1.0, "oracle": 1.0},
                          resolved={"first": 1, "random": 2, "majority": 2, "shortest": 2, "value": 2, "oracle": 2},
                          seconds=1.0, candidates_per_second=6.0)
    assert labels(report)["majority"] == "most common actions"
    render_report(report, OutputFormat.text, tmp_path)
    out = capsys.readouterr().out
    assert "most common patch" not in out and "most common actions" in out
    assert "2 of 6 candidate(s) were dropped before picking (no tool call and no answer; --no-filter keeps them)" in out
    assert "dropped before picking" in markdown_section(report)


def test_a_suite_without_groupings_is_not_a_repository_none(tmp_path):
    argv = [sys.executable, "-m", "orchard_cli.main", "eval", "capitals", "--predictions", "gold", "--limit", "2",
            "--out", str(tmp_path / "cap")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    assert "(none)" not in proc.stderr and "repository" not in proc.stderr
    assert "(none)" not in (tmp_path / "cap" / "scorecard.md").read_text()
    # piped: a long line stays one line (rich used to fold it at 80 columns, mid-word)
    header = [line for line in proc.stderr.splitlines() if line.startswith("orchard eval capitals:")]
    assert header and header[0].endswith("1 worker(s)"), proc.stderr


def test_limit_says_when_it_took_one_category_only(tmp_path):
    from orchard_cli.rollout.eval_run import EvalConfig, narrow_limit, plan_eval

    plan = plan_eval(EvalConfig(suite="claw-mini", limit=2, predictions="gold", out=str(tmp_path / "r")))
    note = narrow_limit(plan)
    assert note and note.startswith("note: --limit 2 takes the suite's first 2 tasks, all of category calendar")
    assert "--sample N spreads over them, --group or --instances choose" in note
    chosen = plan_eval(EvalConfig(suite="claw-mini", limit=2, groups={"category": ["calendar"]}, predictions="gold",
                                  out=str(tmp_path / "g")))
    assert narrow_limit(chosen) is None  # a group asked for is no surprise
    spread = plan_eval(EvalConfig(suite="claw-mini", instances=[plan.tasks[0].task_id, "contacts-1002"],
                                  predictions="gold", out=str(tmp_path / "s")))
    assert narrow_limit(spread) is None


@pytest.mark.bwrap
def test_a_second_regrade_needs_no_invented_out(capsys, tmp_path):
    run = tmp_path / "cap"
    assert _cli(capsys, "eval", "capitals", "--predictions", "gold", "--limit", "1", "--out", str(run), "--quiet")[0] == 0
    assert _cli(capsys, "eval", "regrade", str(run), "--quiet")[0] == 0
    code, out, err = _cli(capsys, "eval", "regrade", str(run), "--quiet")
    assert code == 0, err
    assert (run / "regrade-2" / "scorecard.json").is_file() and str(run / "regrade-2") in out


def test_a_missing_repo_mirror_is_found_before_the_run_folder(capsys, tmp_path):
    code, _, err = _cli(capsys, "eval", "swe-mini", "--predictions", "gold", "--repo-mirror", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "run"))
    assert code == 2 and f"--repo-mirror {tmp_path / 'nope'}: no such folder" in err
    assert not (tmp_path / "run").exists()


def test_the_header_counts_the_workers_a_run_keeps_busy(capsys, tmp_path):
    """The walkthrough: 'eval claw-mini ... --limit 2' said '3 worker(s)' (the default) for 2 episodes."""
    code, _, err = _cli(capsys, "eval", "calc", "--predictions", "gold", "--limit", "2", "--workers", "3",
                        "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert "2 worker(s) (of --workers 3: 2 episode(s))" in err
    code, _, err = _cli(capsys, "eval", "calc", "--predictions", "gold", "--limit", "2", "--workers", "2",
                        "--out", str(tmp_path / "run2"))
    assert code == 0 and ", 2 worker(s)\n" in err, err
