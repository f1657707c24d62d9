"""Fixtures for harness tests: the real harnesses installed once per session by
scripts/install-harnesses.sh, and the episode rig (harness_rig.py) over a local sandbox."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from harness_rig import REPO, Rig

from orchard_cli.env.manager import EnvManager
from orchard_cli.harnesses.install import harnesses_root


@pytest.fixture(scope="session")
def installed_harnesses() -> Path:
    """The pinned Node, Codex CLI and OpenClaw, installed (or found at their pins) once per session."""
    proc = subprocess.run([str(REPO / "scripts" / "install-harnesses.sh")], capture_output=True, text=True,
                          timeout=1200, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        message = f"scripts/install-harnesses.sh failed ({proc.returncode}): {proc.stderr[-3000:]}"
        if os.environ.get("ORCHARD_TEST_STRICT") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return harnesses_root()


@pytest.fixture()
def rig(tmp_path) -> Iterator[Rig]:
    env = EnvManager("local", root=str(tmp_path / "local"))
    rig = Rig(env)
    try:
        yield rig
    finally:
        rig.close()
        env.close()
