"""Fixtures of the SWE grading tests: swebench 5.x in a venv of its own, for the cross-check."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

SWEBENCH5 = "swebench==5.0.2"
SCRIPT = Path(__file__).with_name("official5_verdict.py")


@pytest.fixture(scope="session")
def official5(request) -> str:
    """The python of a venv holding swebench 5.x (--no-deps) and unidiff, created once."""
    given = os.environ.get("ORCHARD_SWEBENCH5_PYTHON")
    if given:
        return given
    folder = Path(request.config.cache.mkdir("swebench5-venv"))
    python = folder / "bin" / "python"
    ready = folder / ".ready"
    if ready.is_file() and ready.read_text() == SWEBENCH5 and python.exists():
        return str(python)
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    result = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", SWEBENCH5,
                             "unidiff==1.0.1"], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        pytest.skip(f"could not install {SWEBENCH5} from the package index: {result.stderr[-300:]}")
    ready.write_text(SWEBENCH5)
    return str(python)


@pytest.fixture(scope="session")
def swebench5(official5):
    """cases -> swebench 5.x's own {resolved, tests_status} for each (a case: instance_id, repo,
    version, log_parser, FAIL_TO_PASS, PASS_TO_PASS, log)."""
    def verdicts(cases: list[dict]) -> list[dict]:
        result = subprocess.run([official5, str(SCRIPT)], input=json.dumps(cases), capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout)

    return verdicts
