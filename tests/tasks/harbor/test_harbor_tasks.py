"""The harbor family's loading and its pure parts: task.toml of every schema version read, the
refusals by name, the reward files, FROM lines and --image-map, the guarded loader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchard_cli.errors import UsageError
from orchard_cli.tasks.harbor.environment import base_images, image_tag, map_images, parse_image_map
from orchard_cli.tasks.harbor.family import read_rewards
from orchard_cli.tasks.harbor.taskfile import load_task_dir
from orchard_cli.tasks.registry import folder_family, load_suite

ORCHARD = [sys.executable, "-m", "orchard_cli.main"]


def make_task(root: Path, name: str = "t1", toml: str = 'version = "1.0"\n', dockerfile: str | None = "FROM orchard/base:bookworm\nWORKDIR /app\n",
              test: str = "echo 1 > /logs/verifier/reward.txt\n", solve: str | None = "true\n") -> Path:
    folder = root / name
    (folder / "tests").mkdir(parents=True)
    (folder / "task.toml").write_text(toml)
    (folder / "instruction.md").write_text("Do the thing.\n")
    (folder / "tests/test.sh").write_text("#!/bin/bash\n" + test)
    if dockerfile is not None:
        (folder / "environment").mkdir()
        (folder / "environment/Dockerfile").write_text(dockerfile)
    if solve is not None:
        (folder / "solution").mkdir()
        (folder / "solution/solve.sh").write_text("#!/bin/bash\n" + solve)
    return folder


def test_harbor_mini_loads_both_schemas():
    family, tasks = load_suite("harbor-mini")
    assert family.name == "harbor" and len(tasks) >= 20
    schemas = {family.describe(t)["schema"] for t in tasks}
    assert schemas == {"1.0", "1.1"}
    assert {family.groups(t)["category"] for t in tasks} == {"shell", "files", "git", "service", "data"}
    for task in tasks:
        parsed = family.parsed(task)
        assert parsed.refusal() is None and parsed.has_solution and parsed.has_near_miss
        assert parsed.config.memory_bytes() == 2 << 30


def test_folder_of_task_toml_is_harbor(tmp_path):
    make_task(tmp_path, "a")
    make_task(tmp_path, "b")
    assert folder_family(tmp_path) == "harbor" and folder_family(tmp_path / "a") == "harbor"
    family, tasks = load_suite(str(tmp_path))
    assert family.name == "harbor" and [t.task_id for t in tasks] == ["a", "b"]


def test_named_instances_load_beside_a_malformed_task(tmp_path):
    # real datasets hold broken task folders; naming the good ones must not read the broken one
    make_task(tmp_path, "good")
    (make_task(tmp_path, "broken") / "tests/test.sh").unlink()
    family, tasks = load_suite(str(tmp_path), instances=["good"])
    assert [t.task_id for t in tasks] == ["good"]
    family, tasks = load_suite(str(tmp_path))  # the whole dataset: the broken one is kept, with its cause
    refused = family.describe(next(t for t in tasks if t.task_id == "broken"))["refused"]
    assert refused.startswith("invalid_task: ") and "no tests/test.sh" in refused
    with pytest.raises(UsageError, match="unknown instance id"):
        load_suite(str(tmp_path), instances=["good", "gone"])


@pytest.mark.parametrize("toml,extra,why", [
    ('schema_version = "1.2"\n[[steps]]\nname = "one"\n', None, "multi-step"),
    ('version = "1.0"\n[verifier.environment]\ndocker_image = "x"\n', None, "separate verifier environment"),
    ('version = "1.0"\n[environment]\nmcp_servers = [{name = "fs", command = "x"}]\n', None, "MCP servers"),
    ('version = "1.0"\n[environment]\ngpus = 1\n', None, "GPU"),
    ('version = "1.0"\n', "services:\n  main:\n    build: .\n  db:\n    image: x\n    volumes: [data:/var/lib]\n",
     "db has volumes"),
    ('version = "1.0"\n', "services:\n  main: {}\n  db:\n    image: x\n    privileged: true\n", "db uses privileged"),
    ('version = "1.0"\n', "services:\n  db:\n    image: x\n    depends_on: [main]\n", "depends on main"),
    ('version = "1.0"\n', "services:\n  main:\n    build: ../..\n", "outside environment/"),
    ('schema_version = "1.1"\n[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n', None,
     "allowlist"),
])
def test_refused_by_name(tmp_path, toml, extra, why):
    folder = make_task(tmp_path, toml=toml, dockerfile=None if extra else "FROM orchard/base:bookworm\n")
    if extra:
        (folder / "environment").mkdir()
        (folder / "environment/Dockerfile").write_text("FROM orchard/base:bookworm\n")
        (folder / "environment/docker-compose.yaml").write_text(extra)
    category, reason = load_task_dir(folder).refusal()
    assert category == "unsupported" and why in reason


def test_compose_file_read_as_harbor_sets_it(tmp_path):
    """main is the sandbox (built from environment/ unless its build says otherwise); the others
    are side services in depends_on order, compose's variables interpolated; a malformed file is
    invalid_task naming it."""
    folder = make_task(tmp_path)
    (folder / "environment/web").mkdir()
    (folder / "environment/web/web.Dockerfile").write_text("FROM orchard/base:bookworm\n")
    (folder / "environment/docker-compose.yaml").write_text(
        "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}\n    image: ${MAIN_IMAGE_NAME}\n"
        "    environment:\n      - URL=http://web:${PORT:-81}\n    volumes:\n      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}\n"
        "    depends_on: [web]\n"
        "  web:\n    build:\n      context: web\n      dockerfile: web.Dockerfile\n    command: python3 -m http.server 81\n"
        "    depends_on: {db: {condition: service_healthy}}\n    ports: ['81:81']\n"
        "    healthcheck:\n      test: curl -f http://localhost:81 || exit 1\n"
        "  db:\n    image: postgres:16\n    environment: {POSTGRES_PASSWORD: $$secret}\n")
    task = load_task_dir(folder)
    assert task.refusal() is None
    plan = task.compose_plan
    assert plan["main"]["context"] == "environment" and plan["main"]["env"] == {"URL": "http://web:81"}
    assert [s["name"] for s in plan["sides"]] == ["db", "web"]
    db, web = plan["sides"]
    assert db["image"] == "postgres:16" and db["env"] == {"POSTGRES_PASSWORD": "$secret"}
    assert web["context"] == "environment/web" and web["dockerfile"] == "web.Dockerfile"
    assert web["command"] == ["python3", "-m", "http.server", "81"]
    assert web["healthcheck"] == ["CMD-SHELL", "curl -f http://localhost:81 || exit 1"]
    (folder / "environment/docker-compose.yaml").write_text("services: [oops\n")
    category, reason = load_task_dir(folder).refusal()
    assert category == "invalid_task" and "not valid YAML" in reason
    (folder / "environment/docker-compose.yaml").write_text("services:\n  web:\n    build: nowhere\n")
    category, reason = load_task_dir(folder).refusal()
    assert category == "invalid_task" and "no environment/nowhere/Dockerfile" in reason


BAD_COMPOSE = {  # task -> (compose file, what its one-line cause names)
    "quote": ("services:\n  main: {}\n  job:\n    image: x\n    command: \"python3 -c 'print(1)\"\n",
              "services.job.command: No closing quotation"),
    "string-body": ("services:\n  main: {}\n  db: postgres\n", "services.db: not a mapping"),
    "health-int": ("services:\n  main: {}\n  db:\n    image: x\n    healthcheck: {test: 5}\n",
                   "services.db.healthcheck.test: neither a string nor a list"),
    "int-name": ("services:\n  main: {}\n  1:\n    image: x\n", "services.1: not a name"),
    "chain": ("services:\n  main: {}\n" + "".join(f"  s{i}:\n    image: x\n    depends_on: [s{i + 1}]\n"
                                                 for i in range(1200)) + "  s1200:\n    image: x\n", None),
    "cond": ("services:\n  main: {}\n  a:\n    image: x\n    depends_on: {b: {condition: service_ready}}\n"
             "  b:\n    image: x\n", "services.a.depends_on.b.condition: 'service_ready' is not one of"),
    "depends-str": ("services:\n  main: {}\n  a:\n    image: x\n    depends_on: b\n",
                    "services.a.depends_on: neither a list"),
    "bad-condition": ("services:\n  main: {}\n  a:\n    image: x\n    depends_on: {b: {condition: [1]}}\n"
                      "  b:\n    image: x\n", "services.a.depends_on.b.condition: '[1]' is not one of"),
    "int-key": ("services:\n  main: {}\n  a:\n    image: x\n    1: 2\n", "services.a: the key 1 is not a name"),
    "volumes-int": ("services:\n  main:\n    volumes: 5\n", "services.main.volumes: not a list"),
}


def test_malformed_compose_files_are_each_invalid_beside_a_good_task(tmp_path):
    """One malformed compose file is that task's invalid_task, with a one-line cause naming the
    file and the field; the dataset's other tasks load (`tasks ls` lists them all, exit 0)."""
    make_task(tmp_path, "good")
    for name, (text, _) in BAD_COMPOSE.items():
        (make_task(tmp_path, name) / "environment/docker-compose.yaml").write_text(text)
    family, tasks = load_suite(str(tmp_path))
    refused = {t.task_id: family.describe(t)["refused"] for t in tasks}
    assert refused.pop("good") is None
    for name, (_, why) in BAD_COMPOSE.items():
        reason = refused[name]
        if name == "chain":  # a long chain of depends_on is read (no recursion), in order
            assert reason is None
            sides = family.parsed(next(t for t in tasks if t.task_id == name)).compose_plan["sides"]
            assert [s["name"] for s in sides][:2] == ["s1200", "s1199"] and len(sides) == 1201
            continue
        assert reason.startswith("invalid_task: a docker-compose environment (environment/docker-compose.yaml): ")
        assert why in reason and "\n" not in reason, reason
    proc = subprocess.run([*ORCHARD, "tasks", "ls", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {line.split("\t")[0] for line in proc.stdout.splitlines()} == {"good", *BAD_COMPOSE}


def test_compose_build_keys(tmp_path):
    """build.dockerfile normalised (`./Dockerfile` is the Dockerfile --image-map rewrites),
    build.target read, the build keys orchard cannot honour refused by name."""
    from orchard_cli.tasks.harbor.environment import _context

    folder = make_task(tmp_path, dockerfile="FROM python:3.12\nWORKDIR /app\n")
    compose = folder / "environment/docker-compose.yaml"
    compose.write_text("services:\n  main:\n    build: {context: ., dockerfile: ./Dockerfile, target: dev}\n")
    main = load_task_dir(folder).compose_plan["main"]
    assert main["dockerfile"] == "Dockerfile" and main["target"] == "dev"
    mapped = map_images("FROM python:3.12\n", {"python:3.12": "orchard/base:bookworm"})
    import io
    import tarfile
    tar = tarfile.open(fileobj=io.BytesIO(_context(folder, "t1", "environment", main["dockerfile"], mapped)))
    assert [m.name for m in tar.getmembers() if "Dockerfile" in m.name] == ["Dockerfile"]
    assert tar.extractfile("Dockerfile").read().decode() == mapped
    for key in ("additional_contexts: {x: ../x}", "secrets: [s]", "ssh: [default]", "dockerfile_inline: FROM x"):
        compose.write_text(f"services:\n  main:\n    build:\n      context: .\n      {key}\n")
        category, reason = load_task_dir(folder).refusal()
        assert category == "unsupported" and f"services.main.build uses {key.split(':')[0]}" in reason


@pytest.mark.parametrize("env,internet", [
    ('network_mode = "no-network"', False),
    ('network_mode = "public"', True),
    ('allow_internet = true\nnetwork_mode = "no-network"', False),
])
def test_network_mode_is_read(tmp_path, env, internet):
    # Harbor's later [environment] network_mode (seen on real public tasks) loads and decides the network
    make_task(tmp_path, toml=f'schema_version = "1.1"\n[environment]\n{env}\n', dockerfile="FROM orchard/base:bookworm\n")
    task = load_task_dir(tmp_path / "t1")
    assert task.refusal() is None and task.config.environment.allow_internet is internet


def test_keys_harbor_does_not_define_are_left_out_and_named(tmp_path):
    """As Harbor's loader: a key it does not define does not refuse the task (public tasks carry
    workdir, tags, description, ...); it is named, with the known key a misspelling is close to."""
    make_task(tmp_path, toml='version = "1.0"\ntags = ["x"]\n[agent]\ntimeout_secs = 5\n[environment]\nworkdir = "/app"\n')
    task = load_task_dir(tmp_path / "t1")
    assert task.ignored == ["tags", "agent.timeout_secs (did you mean agent.timeout_sec?)", "environment.workdir"]
    assert task.config.agent.timeout_sec == 600.0  # the misspelt key sets nothing
    proc = subprocess.run([*ORCHARD, "tasks", "ls", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "t1" in proc.stdout, proc.stderr
    assert "agent.timeout_secs (did you mean agent.timeout_sec?)" in proc.stderr
    make_task(tmp_path / "bad", toml='version = "1.0"\n[agent]\ntimeout_sec = "soon"\n')
    with pytest.raises(UsageError, match=r"task.toml: agent.timeout_sec: "):  # a known key's value is still checked
        load_task_dir(tmp_path / "bad" / "t1")


def test_a_test_file_linked_out_of_the_task_is_refused(tmp_path):
    folder = make_task(tmp_path)
    os.symlink("/etc/hostname", folder / "tests/leak.txt")
    with pytest.raises(UsageError, match="outside"):
        load_task_dir(folder)


def test_rewards():
    assert read_rewards("== reward.txt\n1\n") == {"reward_file": "reward.txt", "rewards": {"reward": 1.0}}
    both = read_rewards('== reward.json\n{"a": 1, "b": 0.5}\n== reward.txt\n1\n')
    assert both == {"reward_file": "reward.json", "rewards": {"a": 1.0, "b": 0.5}}
    assert "reward_error" in read_rewards("== reward.txt\npass\n")
    assert "reward_error" in read_rewards('== reward.json\n{"a": "yes"}\n')
    assert read_rewards("") == {}
    # Harbor leaves out keys that are not numbers; non-finite or oddly spelt numbers are errors
    assert read_rewards('== reward.json\n{"reward": 1, "details": "ok"}\n')["rewards"] == {"reward": 1.0}
    for bad in ("== reward.txt\ninf\n", "== reward.txt\nnan\n", "== reward.txt\n1_0\n",
                "== reward.json\nNaN\n", '== reward.json\n{"reward": Infinity}\n', "== reward.json\n1e999\n",
                "== reward.json\n" + "9" * 400 + "\n", '== reward.json\n{"a": ' + "9" * 400 + "}\n"):
        assert "reward_error" in read_rewards(bad), bad


def test_from_lines_and_image_map():
    text = "ARG BASE=ubuntu:24.04\nFROM $BASE AS build\nRUN make\nFROM --platform=linux/amd64 python:3.13-slim\nCOPY --from=build /x /x\n"
    assert base_images(text) == ["ubuntu:24.04", "python:3.13-slim"]
    mapped = map_images(text, {"ubuntu:24.04": "orchard/base:bookworm"})
    assert "FROM orchard/base:bookworm AS build" in mapped and "python:3.13-slim" in mapped
    assert base_images(mapped) == ["orchard/base:bookworm", "python:3.13-slim"]
    assert image_tag("t", text, {"a": "1"}) != image_tag("t", text, {"a": "2"})
    assert image_tag("t", text, {"a": "1"}) == image_tag("t", text, {"a": "1"})
    assert parse_image_map(["a:1=b:2"]) == {"a:1": "b:2"}
    with pytest.raises(UsageError, match="SRC=DST"):
        parse_image_map(["nonsense"])


def test_env_lines_substitute_as_docker_does_on_the_host(tmp_path):
    """The local backend's reading of a Dockerfile: $VAR, ${VAR}, ${VAR:-word} from the ARG and ENV
    lines before (one ENV line sees the values from before it), none inside single quotes, \\$
    literal, $PATH the base image's."""
    from orchard_cli.tasks.harbor.hostenv import BASE_ENV, host_plan

    make_task(tmp_path, dockerfile="FROM orchard/base:bookworm\nARG APP=/app\nWORKDIR $APP\n"
              "ENV TOOLS=${APP}/bin PATH=/opt/x:$PATH\n"
              "ENV BIN=$TOOLS LIT='$TOOLS' EMPTY=${NOPE:-dflt} PLUS=${TOOLS:+yes} ESC=\\$HOME\n"
              "ENV SAME=1 SEE=$SAME\nENV OLD form $BIN\n")
    workdir, copies, env = host_plan(load_task_dir(tmp_path / "t1"), {})
    assert workdir == "/app" and copies == []
    assert env == {"TOOLS": "/app/bin", "PATH": "/opt/x:" + BASE_ENV["PATH"], "BIN": "/app/bin", "LIT": "$TOOLS",
                   "EMPTY": "dflt", "PLUS": "yes", "ESC": "$HOME", "SAME": "1", "SEE": "", "OLD": "form /app/bin"}


QUOTED_ARGS = ('FROM orchard/base:bookworm\nARG GREETING="hello world"\nARG NOTE="don\'t panic"\nWORKDIR /app\n'
               'ENV MSG=$GREETING N=$NOTE BRACED="${GREETING}!" DFLT=${NOPE:-"a b"}\nENV LEGACY say $GREETING\n')
QUOTED_ENV = {"MSG": "hello world", "N": "don't panic", "BRACED": "hello world!", "DFLT": "a b",
              "LEGACY": "say hello world"}


def test_env_values_with_blanks_and_quotes_stay_whole_on_the_host(tmp_path):
    """Docker splits a line into words first and substitutes inside each: an ARG holding a blank
    or a quote gives the whole value (test_harbor_docker checks the same lines against docker build);
    an unclosed quote is needs_image naming the line, not a crash."""
    from orchard_cli.tasks.harbor.hostenv import host_plan

    make_task(tmp_path, dockerfile=QUOTED_ARGS)
    workdir, _, env = host_plan(load_task_dir(tmp_path / "t1"), {})
    assert env == QUOTED_ENV
    make_task(tmp_path, "t2", dockerfile="FROM orchard/base:bookworm\nWORKDIR /app\nENV A=\"open\n")
    why = host_plan(load_task_dir(tmp_path / "t2"), {})
    assert isinstance(why, str) and "ENV A=" in why and "unclosed double quote" in why


@pytest.mark.parametrize("main,why", [
    ("environment: {GREETING: hi}", "sets environment"),
    ("working_dir: /srv", "sets working_dir"),
    ("build: {context: ., dockerfile: other.Dockerfile}", "sets build.dockerfile"),
    ("build: {context: ., args: {V: '1'}}", "sets build.args"),
    ("image: python:3.12", "runs the image python:3.12"),
    ("build: .\n    image: ${MAIN_IMAGE_NAME}\n    volumes: ['${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}']", None),
])
def test_compose_main_on_the_local_backend(tmp_path, main, why):
    """On local, a compose task whose only service is main runs on the host only when main is the
    default build of environment/Dockerfile (the one file the host reading follows); else
    needs_image naming what main sets."""
    from orchard_cli.rollout.failures import EpisodeFailure

    folder = make_task(tmp_path)
    (folder / "environment/other.Dockerfile").write_text("FROM orchard/base:bookworm\nWORKDIR /srv\n")
    (folder / "environment/docker-compose.yaml").write_text(f"services:\n  main:\n    {main}\n")
    family, tasks = load_suite(str(tmp_path))
    if why is None:
        spec = family.task_spec(tasks[0], "local")
        assert spec.image == "host" and spec.workdir == "/app"
        from orchard_cli.tasks.harbor.family import release

        release(spec)
        return
    with pytest.raises(Exception) as failure:
        family.task_spec(tasks[0], "local")
    assert isinstance(failure.value, EpisodeFailure) and failure.value.category == "needs_image"
    assert why in str(failure.value) and "--backend docker" in str(failure.value)
