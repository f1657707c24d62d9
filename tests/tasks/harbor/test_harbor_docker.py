"""harbor-mini on the docker backend, and what the family promises on it: every task valid three
ways (gold passes, null fails, near miss fails); a planted reward never counts; a base image the
engine lacks is needs_image until --image-map maps it, on the record."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_harbor_tasks import make_task

pytestmark = pytest.mark.docker
ORCHARD = [sys.executable, "-m", "orchard_cli.main"]


def test_every_harbor_mini_task_is_valid(harbor_mini_validated):
    bad = {k: v.reason() for k, v in harbor_mini_validated.items() if not v.valid}
    assert len(harbor_mini_validated) >= 20 and not bad
    assert {"compose-token", "compose-store"} <= set(harbor_mini_validated)  # main beside side services
    for result in harbor_mini_validated.values():
        assert [v.way for v in result.verdicts] == ["gold", "null", "near_miss"]
        assert result.verdicts[2].category == "unresolved"  # a real near miss ran, and failed


def test_planted_reward_and_tests_do_not_count_and_trajectory_is_atif(tmp_path):
    """The 'agent' (a near miss) writes reward 1 and its own /tests/test.sh; the verifier empties
    both before it runs; the verifier itself checks /logs/agent/trajectory.json is ATIF."""
    check = ("python3 -c \"import json,sys; t=json.load(open('/logs/agent/trajectory.json')); "
             "sys.exit(0 if t['schema_version']=='ATIF-v1.4' and t['steps'][0]['step_id']==1 else 1)\" "
             "&& [ -f /app/done ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    folder = make_task(tmp_path, test=check, solve="touch /app/done\n")
    (folder / "solution/near_miss.sh").write_text(
        "mkdir -p /tests /logs/verifier && echo 1 > /logs/verifier/reward.txt\n"
        "printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh\n")
    proc = subprocess.run([*ORCHARD, "tasks", "validate", str(tmp_path), "--backend", "docker", "--format", "json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts = {v["way"]: v for v in json.loads(proc.stdout)["results"][0]["verdicts"]}
    assert verdicts["gold"]["resolved"] and not verdicts["near_miss"]["resolved"]
    assert verdicts["near_miss"]["category"] == "unresolved"


def test_links_planted_at_the_verifiers_folders_do_not_count(tmp_path):
    """A near miss that turns /logs/verifier and /tests into links to its own folders (holding a
    reward of 1 and a test.sh of its own) does not resolve: the links are removed, not followed."""
    folder = make_task(tmp_path, test="[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
                       solve="touch /app/done\n")
    (folder / "solution/near_miss.sh").write_text(
        "mkdir -p /tmp/v /tmp/t && echo 1 > /tmp/v/reward.txt && echo '{\"reward\": 1}' > /tmp/v/reward.json\n"
        "printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tmp/t/test.sh\n"
        "rm -rf /logs/verifier /tests && ln -s /tmp/v /logs/verifier && ln -s /tmp/t /tests\n")
    proc = subprocess.run([*ORCHARD, "tasks", "validate", str(tmp_path), "--backend", "docker", "--format", "json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts = {v["way"]: v for v in json.loads(proc.stdout)["results"][0]["verdicts"]}
    assert verdicts["gold"]["resolved"]
    assert not verdicts["near_miss"]["resolved"] and verdicts["near_miss"]["category"] == "unresolved"


def test_a_verifier_that_writes_no_reward_is_an_error_not_unresolved(tmp_path):
    make_task(tmp_path, test="echo 'could not install pytest' >&2; exit 1\n", solve="true\n")
    out = tmp_path / "run"
    proc = subprocess.run([*ORCHARD, "eval", str(tmp_path / "t1"), "--predictions", "gold", "--backend", "docker",
                           "--out", str(out), "--format", "json"], capture_output=True, text=True, timeout=600)
    card = json.loads((out / "scorecard.json").read_text())
    assert card["by_category"].get("env_error") == 1 and not card["by_category"].get("unresolved"), proc.stderr[-1500:]
    assert "neither reward.txt nor reward.json" in next(out.glob("logs/**/error.txt")).read_text()


def test_a_broken_task_folder_does_not_refuse_the_dataset(tmp_path):
    """One folder whose task.toml is not TOML: the other task runs; the broken one is kept as
    invalid_task with its cause, on stderr and on the scorecard. A single broken task is bad input."""
    make_task(tmp_path, name="good", test="echo 1 > /logs/verifier/reward.txt\n")
    make_task(tmp_path, name="broken", toml='version = "1.0\n')
    out = tmp_path / "run"
    proc = subprocess.run([*ORCHARD, "eval", str(tmp_path), "--predictions", "gold", "--backend", "docker",
                           "--out", str(out), "--format", "json"], capture_output=True, text=True, timeout=600)
    assert "broken is not a readable Harbor task" in proc.stderr, proc.stderr[-1500:]
    card = json.loads((out / "scorecard.json").read_text())
    assert card["resolved"] == 1 and card["by_category"]["invalid_task"] == 1, proc.stderr[-1500:]
    assert "not valid TOML" in next(out.glob("logs/**/broken*/**/error.txt")).read_text()
    proc = subprocess.run([*ORCHARD, "eval", str(tmp_path / "broken"), "--predictions", "gold", "--backend", "docker",
                           "--out", str(tmp_path / "run2")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "not valid TOML" in proc.stderr and not (tmp_path / "run2").exists()


def test_missing_base_image_is_needs_image_until_mapped(tmp_path):
    make_task(tmp_path, dockerfile="FROM orchard-test/absent-base:24.04\nWORKDIR /app\n",
              test="[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
              solve="touch /app/done\n")
    out = tmp_path / "run1"
    proc = subprocess.run([*ORCHARD, "eval", str(tmp_path / "t1"), "--predictions", "gold", "--backend", "docker",
                           "--out", str(out), "--format", "json"], capture_output=True, text=True, timeout=600)
    card = json.loads((out / "scorecard.json").read_text())
    assert card["by_category"]["needs_image"] == 1, proc.stderr[-1500:]
    error = (next(out.glob("logs/**/error.txt"))).read_text()
    assert "orchard-test/absent-base:24.04" in error and "--image-map" in error
    out2 = tmp_path / "run2"
    proc = subprocess.run([*ORCHARD, "eval", str(tmp_path / "t1"), "--predictions", "gold", "--backend", "docker",
                           "--image-map", "orchard-test/absent-base:24.04=orchard/base:bookworm",
                           "--out", str(out2), "--format", "json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-1500:]
    card = json.loads((out2 / "scorecard.json").read_text())
    assert card["resolved"] == 1
    assert card["reproducibility"]["config"]["image_map"] == {"orchard-test/absent-base:24.04": "orchard/base:bookworm"}
    assert json.loads((out2 / "config.json").read_text())["image_map"]


def test_solution_timeout_is_honoured(tmp_path):
    """[solution] timeout_sec cuts the gold solver; the error names it."""
    make_task(tmp_path, toml='version = "1.0"\n[solution]\ntimeout_sec = 2\n',
              test="[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
              solve="sleep 60; touch /app/done\n")
    out = tmp_path / "run"
    proc = subprocess.run([*ORCHARD, "eval", str(tmp_path / "t1"), "--predictions", "gold", "--backend", "docker",
                           "--out", str(out), "--format", "json"], capture_output=True, text=True, timeout=600)
    card = json.loads((out / "scorecard.json").read_text())
    assert card["resolved"] == 0, proc.stderr[-1500:]
    assert "ran past its [solution] timeout_sec (2 s)" in next(out.glob("logs/**/error.txt")).read_text()


def test_compose_main_build_target_and_missing_image(tmp_path):
    """build.target builds that stage (and is part of the image's tag); a compose main with
    `image:` and no `build:` that the engine lacks is needs_image naming it, not a failed build."""
    from orchard_cli.env.images import docker_client, ensure_base_image
    from orchard_cli.rollout.failures import EpisodeFailure
    from orchard_cli.tasks.registry import load_suite

    ensure_base_image(quiet=True)
    folder = make_task(tmp_path, "staged", dockerfile="FROM orchard/base:bookworm AS one\nRUN echo one > /stage\n"
                       "FROM orchard/base:bookworm AS two\nRUN echo two > /stage\nWORKDIR /app\n")
    compose = folder / "environment/docker-compose.yaml"
    found = {}
    for stage in ("one", "two"):
        compose.write_text(f"services:\n  main:\n    build: {{context: ., target: {stage}}}\n")
        family, tasks = load_suite(str(tmp_path))
        image = family.task_spec(tasks[0], "docker").image
        found[stage] = docker_client().containers.run(image, ["cat", "/stage"], remove=True).decode().strip()
    assert found == {"one": "one", "two": "two"}
    compose.write_text("services:\n  main:\n    image: orchard-test/absent-main:nope\n")
    family, tasks = load_suite(str(tmp_path))
    with pytest.raises(EpisodeFailure) as failure:
        family.task_spec(tasks[0], "docker")
    assert failure.value.category == "needs_image" and "orchard-test/absent-main:nope" in str(failure.value)


def test_host_reading_of_env_lines_matches_docker_build(tmp_path):
    """The local backend's reading of ARG/ENV lines with blanks and quotes gives what docker build
    gives (the image's own environment)."""
    from test_harbor_tasks import QUOTED_ARGS, QUOTED_ENV

    from orchard_cli.env.images import docker_client, ensure_base_image
    from orchard_cli.tasks.harbor.hostenv import host_plan
    from orchard_cli.tasks.harbor.taskfile import load_task_dir

    ensure_base_image(quiet=True)
    folder = make_task(tmp_path, dockerfile=QUOTED_ARGS)
    image, _ = docker_client().images.build(path=str(folder / "environment"), rm=True, pull=False)
    try:
        built = dict(e.split("=", 1) for e in image.attrs["Config"]["Env"])
        assert {k: built[k] for k in QUOTED_ENV} == QUOTED_ENV
        assert host_plan(load_task_dir(folder), {})[2] == {k: built[k] for k in QUOTED_ENV}
    finally:
        docker_client().images.remove(image.id, force=True)
