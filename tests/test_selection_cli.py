"""`--group KEY=VALUE` and `--sample N --sample-seed S` through the CLI: the same spelling in every
command that selects tasks, the same tasks twice for one seed, spread over the family's groups,
recorded in the run's config.json (so `--resume` refuses another selection), and bad input
refused in one line, exit 2, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchard_cli.main import main


def _run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _ls(capsys, *argv) -> list[dict]:
    code, out, err = _run(capsys, "tasks", "ls", *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)["instances"]


def test_a_sample_is_the_same_twice_and_spread_over_the_groups(capsys):
    every = _ls(capsys, "claw-mini")
    strata = {tuple(sorted(row["groups"].items())) for row in every}
    assert len(strata) == 9  # category x difficulty as claw-mini has them
    one = _ls(capsys, "claw-mini", "--sample", str(len(strata)), "--sample-seed", "1")
    assert one == _ls(capsys, "claw-mini", "--sample", str(len(strata)), "--sample-seed", "1")
    assert {tuple(sorted(row["groups"].items())) for row in one} == strata  # one task of each stratum
    ids = [row["instance_id"] for row in every]
    assert [r["instance_id"] for r in one] == [i for i in ids if i in {r["instance_id"] for r in one}]  # data order
    seeds = {tuple(r["instance_id"] for r in _ls(capsys, "claw-mini", "--sample", "3", "--sample-seed", str(s)))
             for s in range(4)}
    assert len(seeds) > 1  # the seed decides which


def test_groups_of_one_key_are_any_of_them_and_of_several_keys_all(capsys):
    rows = _ls(capsys, "claw-mini", "--group", "category=mail", "--group", "category=todo",
               "--group", "difficulty=easy")
    assert len(rows) == 16
    assert {r["groups"]["category"] for r in rows} == {"mail", "todo"}
    assert {r["groups"]["difficulty"] for r in rows} == {"easy"}


def test_repo_is_the_repo_group(capsys):
    ids = [r["instance_id"] for r in _ls(capsys, "swe-mini", "--group", "repo=pypi/toolz")]
    assert len(ids) == 8 and all(i.startswith("toolz__") for i in ids)
    assert [r["instance_id"] for r in _ls(capsys, "swe-mini", "--repo", "pypi/toolz")] == ids
    assert [r["instance_id"] for r in _ls(capsys, "swe-mini", "--repo", "toolz")] == ids
    both = _ls(capsys, "swe-mini", "--group", "repo=pypi/toolz", "--group", "repo=pypi/boltons")
    assert len(both) == 16


def test_eval_takes_the_sample_records_it_and_resume_refuses_another(capsys, tmp_path):
    listed = [r["instance_id"] for r in _ls(capsys, "calc", "--sample", "2", "--sample-seed", "1")]
    assert len(listed) == 2
    for out in ("a", "b"):
        code, _, err = _run(capsys, "eval", "calc", "--predictions", "gold", "--sample", "2", "--sample-seed", "1",
                            "--out", str(tmp_path / out), "-q")
        assert code == 0, err
        rows = [json.loads(line) for line in (tmp_path / out / "results.jsonl").read_text().splitlines()]
        assert [r["instance_id"] for r in rows] == listed
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert (config["sample"], config["sample_seed"], config["groups"]) == (2, 1, None)
    code, _, err = _run(capsys, "eval", "calc", "--predictions", "gold", "--sample", "2", "--sample-seed", "2",
                        "--out", str(tmp_path / "a"), "--resume", "-q")
    assert code == 2 and "different configuration (sample_seed: 1 -> 2)" in err
    code, _, err = _run(capsys, "eval", "calc", "--predictions", "gold", "--group", "repo=orchard/calc",
                        "--sample", "2", "--sample-seed", "1", "--out", str(tmp_path / "a"), "--resume", "-q")
    assert code == 2 and "groups: None -> {'repo': ['orchard/calc']}" in err
    code, _, err = _run(capsys, "eval", "calc", "--predictions", "gold", "--sample", "2", "--sample-seed", "1",
                        "--out", str(tmp_path / "a"), "--resume", "-q")
    assert code == 0, err


def test_distill_takes_the_sample_and_records_it(capsys, tmp_path):
    from orchard_cli.trajectory import read_trajectories

    listed = [r["instance_id"] for r in _ls(capsys, "capitals", "--sample", "3", "--sample-seed", "5")]
    out = tmp_path / "t.jsonl"
    code, _, err = _run(capsys, "distill", "capitals", "--base-url", "gold", "--harness", "chat",
                        "--sample", "3", "--sample-seed", "5", "--out", str(out), "-q")
    assert code == 0, err
    assert sorted(r.task_id for r in read_trajectories(out)) == sorted(listed)
    config = json.loads((tmp_path / "t.run" / "config.json").read_text())
    assert (config["sample"], config["sample_seed"]) == (3, 5)


SELECTORS = [
    ["eval", "claw-mini", "--predictions", "gold", "--out", "run"],
    ["distill", "claw-mini", "--base-url", "scripted", "--out", "t.jsonl"],
    ["rollout", "claw-mini", "--out", "r.jsonl"],
    ["rl", "claw-mini", "--out", "rl-run"],
    ["tasks", "ls", "claw-mini"],
    ["tasks", "validate", "claw-mini"],
]
BAD = [
    (["--group", "category"], "--group 'category' is not KEY=VALUE"),
    (["--group", "categry=mail"], "no grouping 'categry' (did you mean category?); keys: category, difficulty"),
    (["--group", "category=mial"], "no task in group category=mial (did you mean mail?)"),
    (["--sample-seed", "3"], "--sample-seed seeds --sample N"),
]


@pytest.mark.parametrize("argv", SELECTORS, ids=lambda a: " ".join(a[:2]))
@pytest.mark.parametrize("bad,message", BAD, ids=lambda b: b[0] if isinstance(b, list) else "")
def test_bad_selection_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, monkeypatch, argv, bad, message):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, *argv, *bad)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert lines[0].startswith("error: ") and message in lines[0] and len(lines) <= 2, err
    assert list(Path(tmp_path).iterdir()) == []


def test_rl_on_a_rollouts_file_refuses_a_group(capsys, tmp_path):
    (tmp_path / "r.jsonl").write_text("")
    code, _, err = _run(capsys, "rl", "--rollouts", str(tmp_path / "r.jsonl"), "--sample", "2",
                        "--out", str(tmp_path / "rl-run"))
    assert code == 2 and "--group and --sample select a suite's tasks" in err
