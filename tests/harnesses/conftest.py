"""Fixtures for harness tests: the episode rig (harness_rig.py) over a local sandbox (the real
harnesses come from `installed_harnesses` in tests/conftest.py)."""

from __future__ import annotations

from typing import Iterator

import pytest
from harness_rig import Rig

from orchard_cli.env.manager import EnvManager


@pytest.fixture()
def rig(tmp_path) -> Iterator[Rig]:
    env = EnvManager("local", root=str(tmp_path / "local"))
    rig = Rig(env)
    try:
        yield rig
    finally:
        rig.close()
        env.close()
