"""Grading SWE instances on the real docker backend without an official image (no registry here).

The instance is the small real one of `swe_repo` (a git repository the test makes, mounted as a
mirror). The image is built from the local backend's environment build, FROM orchard/base, and
cached by the engine: the module removes it first so the cold build is what the first run does,
then checks that the next run reuses it. Also one task of the bundled swe-mini suite.
Cost on 2 cores: about a minute for the acme/calc part (most of it the first build), plus the
swe-mini task (sdist and pytest from PyPI, a Python 3.11 image) unless its image is cached.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchard_cli.main import main
from orchard_cli.tasks.registry import load_suite
from orchard_cli.tasks.swe import docker_env
from orchard_cli.tasks.swe.instance import ENV_PREFIX

sys.path.insert(0, str(Path(__file__).parent))
import swe_repo  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.bwrap, pytest.mark.slow]


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300, check=check)


def image_state(tag: str) -> tuple[str, str, dict]:
    data = json.loads(docker("image", "inspect", tag).stdout)[0]
    return data["Id"], data["Created"], data["Config"]["Labels"] or {}


def evaluate(capsys, *args: str) -> tuple[int, dict, float]:
    started = time.monotonic()
    code = main(["eval", *args, "--backend", "docker", "--format", "json"])
    seconds = time.monotonic() - started
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else {}), seconds


def results(out: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line]
    return {r["instance_id"]: r for r in rows}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("swe-docker")
    instances, data = swe_repo.write_suite(root)
    family, tasks = load_suite(str(data), repo_mirror=str(root / "mirror"))
    tag = docker_env.image_tag(family.env_key(tasks[0]))
    docker("image", "rm", "-f", tag, check=False)  # the first run below builds it
    yield {"root": root, "home": root / "home", "instances": instances, "data": data,
           "mirror": root / "mirror", "tag": tag, "key": family.env_key(tasks[0])}
    docker("image", "rm", "-f", tag, check=False)


@pytest.fixture
def home(world, monkeypatch):
    monkeypatch.setenv("ORCHARD_HOME", str(world["home"]))
    return world["home"]


@pytest.fixture(scope="module")
def first(world):
    """The cold run: gold patches of both instances, the image built on the way."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ORCHARD_HOME", str(world["home"]))
    out = world["root"] / "gold"
    started = time.monotonic()
    try:
        code = main(["eval", str(world["data"]), "--predictions", "gold", "--backend", "docker",
                     "--repo-mirror", str(world["mirror"]), "--out", str(out), "--fail-under", "1.0"])
    finally:
        mp.undo()
    return {"code": code, "out": out, "seconds": time.monotonic() - started,
            "image": image_state(world["tag"])}


def test_gold_resolves_on_a_locally_built_image(world, first):
    assert first["code"] == 0, (first["out"] / "results.jsonl").read_text()
    found = results(first["out"])
    assert {k: r["category"] for k, r in found.items()} == {"acme__calc-1": "resolved",
                                                            "acme__calc-2": "resolved"}
    _, _, labels = first["image"]
    assert labels[docker_env.KEY_LABEL] == world["key"]
    log = (first["out"] / found["acme__calc-1"]["log_dir"] / "test_output.txt").read_text()
    assert "+ conda activate testbed" in log and "Ran 4 tests" in log
    assert "pip install" not in log  # the install line ran when the environment was built
    script = (first["out"] / found["acme__calc-1"]["log_dir"] / "eval.sh").read_text()
    assert "conda activate testbed" in script and "pip install" not in script
    print(f"cold docker run (local build + image + 2 gradings): {first['seconds']:.1f}s")


def test_the_image_runs_its_interpreter_on_its_own(world, first):
    """Every library the copied interpreter loads is in the image (ldd finds all), in a
    read-only container without the host's pyenv."""
    check = (f"ldd {ENV_PREFIX}/bin/python3 {ENV_PREFIX}/lib/python3.10/lib-dynload/*.so"
             " | grep 'not found'; "
             f"{ENV_PREFIX}/bin/python -c 'import ssl, sqlite3, ctypes, lzma, bz2, readline, calc_extras, sys;"
             " print(sys.prefix)'; ls /testbed 2>&1 | head -1; git --version; patch --version | head -1")
    run = docker("run", "--rm", "--read-only", "--network", "none", world["tag"], "bash", "-c", check,
                 check=False)
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and "not found" not in run.stdout, run.stdout + run.stderr
    assert lines[0] == ENV_PREFIX and "No such file" in lines[1], lines  # /testbed comes per sandbox
    assert lines[2].startswith("git version") and "patch" in lines[3].lower()


def test_second_run_reuses_the_image_and_can_fail(world, first, home, capsys):
    predictions = world["root"] / "mixed.jsonl"
    predictions.write_text("\n".join(json.dumps({"instance_id": i, "model_name_or_path": "t",
                                                 "model_patch": world["instances"][p]})
                                     for i, p in (("acme__calc-1", "gold"), ("acme__calc-2", "wrong"))))
    out = world["root"] / "mixed"
    code, summary, seconds = evaluate(capsys, str(world["data"]), "--predictions", str(predictions),
                                      "--repo-mirror", str(world["mirror"]), "--out", str(out))
    assert code == 0 and summary["resolved"] == 1, summary
    assert {k: r["category"] for k, r in results(out).items()} == {"acme__calc-1": "resolved",
                                                                  "acme__calc-2": "unresolved"}
    assert image_state(world["tag"])[:2] == first["image"][:2]  # same image id and creation time
    assert seconds < first["seconds"]
    print(f"warm docker run (2 gradings): {seconds:.1f}s against {first['seconds']:.1f}s cold")


def test_empty_predictions_resolve_none(world, first, home, capsys):
    out = world["root"] / "empty"
    code, summary, _ = evaluate(capsys, str(world["data"]), "--predictions", "empty",
                                "--repo-mirror", str(world["mirror"]), "--out", str(out))
    assert code == 0 and summary["resolved"] == 0, summary
    assert {r["category"] for r in results(out).values()} == {"empty_patch"}


@pytest.fixture
def mini_home(request, tmp_path_factory, monkeypatch):
    """The session's swe-mini home when conftest offers one (environments shared), else a new one."""
    try:
        path = request.getfixturevalue("swe_mini_home")
    except pytest.FixtureLookupError:
        path = tmp_path_factory.mktemp("swe-mini-home")
    monkeypatch.setenv("ORCHARD_HOME", str(path))
    return path


def test_a_swe_mini_task_resolves_on_docker(mini_home, tmp_path, capsys):
    code, summary, seconds = evaluate(capsys, "swe-mini", "--limit", "1", "--predictions", "gold",
                                      "--out", str(tmp_path / "run"), "--fail-under", "1.0")
    assert code == 0 and summary["resolved"] == 1, summary
    (row,) = results(tmp_path / "run").values()
    assert row["category"] == "resolved"
    print(f"swe-mini task on docker: {seconds:.1f}s")


def test_interrupt_stops_an_image_build_in_progress(tmp_path, monkeypatch):
    """A stopped eval must not wait for a build: the family's interrupt() (what eval calls on
    Ctrl-C) destroys the build sandbox of an image build in progress. The build here would take
    ten minutes (its install step sleeps); after interrupt() it must be over within two."""
    import threading

    from orchard_cli.errors import OrchardError
    from orchard_cli.tasks.swe.family import SWEFamily

    monkeypatch.setenv("ORCHARD_HOME", str(tmp_path / "home"))
    instances, _ = swe_repo.write_suite(tmp_path)
    own = instances["own"]
    record = {**own, "instance_id": "acme__calc-slow",
              "environment": {**own["environment"], "install": [*own["environment"]["install"], "sleep 600"]}}
    family = SWEFamily(repo_mirror=str(tmp_path / "mirror"))
    task = family.task(record, "slow")
    outcome: list[BaseException] = []

    def build() -> None:
        try:
            family.task_spec(task, "docker")
        except BaseException as exc:  # the build's own error is what this test reads
            outcome.append(exc)

    worker = threading.Thread(target=build, daemon=True)
    worker.start()
    deadline = time.monotonic() + 300
    while not docker_env._BUILDS and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert docker_env._BUILDS, outcome  # the local build of the image is under way
    time.sleep(2)  # let it reach its sandbox
    family.interrupt()
    worker.join(120)
    assert not worker.is_alive(), "the build went on after interrupt()"
    assert len(outcome) == 1 and isinstance(outcome[0], OrchardError), outcome
    assert not docker_env._BUILDS
    tag = docker_env.image_tag(family.env_key(task))
    assert docker("image", "inspect", tag, check=False).returncode != 0  # no image was made
