"""The mini checkout's environment is made with uv once per test session (in one ORCHARD_HOME the
claw-eval tests share); each test points ORCHARD_HOME at it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MINI = Path(__file__).resolve().parent / "mini"


@pytest.fixture(scope="session")
def claw_eval_home(tmp_path_factory):
    from orchard_cli.tasks.claw_eval.checkout import Checkout

    home = tmp_path_factory.mktemp("claw-eval-home")
    saved = os.environ.get("ORCHARD_HOME")
    os.environ["ORCHARD_HOME"] = str(home)
    try:
        Checkout(MINI).python()
    finally:
        if saved is None:
            os.environ.pop("ORCHARD_HOME", None)
        else:
            os.environ["ORCHARD_HOME"] = saved
    return home


@pytest.fixture
def mini(claw_eval_home, monkeypatch) -> Path:
    monkeypatch.setenv("ORCHARD_HOME", str(claw_eval_home))
    return MINI
