"""The same harnesses in a docker sandbox: the harness mounts are the same Mount list, bound into
a container built from orchard's base image (its own python3 and glibc, not the host's)."""

from __future__ import annotations

import pytest
from harness_rig import Rig

from orchard_cli.env.images import ensure_base_image
from orchard_cli.env.manager import EnvManager
from orchard_cli.harnesses import load_harness

pytestmark = [pytest.mark.docker, pytest.mark.harness]

REPLIES = {
    "bash": {"tool_calls": [{"name": "bash", "arguments": {"command": "echo changed > hello.txt"}}]},
    "codex": {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo changed > hello.txt"}}]},
}


@pytest.fixture(scope="module")
def base_image() -> str:
    return ensure_base_image(quiet=True)


@pytest.mark.parametrize("name", ["bash", "codex"])
def test_harness_changes_the_workspace_in_a_docker_sandbox(name, base_image, installed_harnesses):
    env = EnvManager("docker")
    rig = Rig(env)
    try:
        rig.start([REPLIES[name], "Done."])
        harness = load_harness(name)
        sandbox = rig.sandbox(harness, image=base_image)
        run = harness.run(sandbox, rig.context(sandbox))
        assert run.exit_code == 0 and run.error is None, run
        assert sandbox.read_file(f"{sandbox.workdir}/hello.txt") == b"changed\n"
        assert rig.changed(sandbox) == ["hello.txt"]
        assert len(rig.episode.records) == rig.endpoint.served == 2
    finally:
        rig.close()
        env.close()
