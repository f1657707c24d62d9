"""harbor-mini on the local backend: a task whose Dockerfile adds nothing to orchard's base but its
files runs on the host's tools (gold passes, null and near miss fail); one with RUN lines is
needs_image, saying why; a docker-compose task is unsupported there, by name; the episode's /logs, /tests and /solution folders are gone afterwards."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.bwrap
ORCHARD = [sys.executable, "-m", "orchard_cli.main"]
HOST = ["count-lines", "http-site", "report-two-parts", "spelling"]


def test_host_compatible_tasks_validate_on_local_and_the_rest_need_their_image(tmp_path):
    import os

    proc = subprocess.run([*ORCHARD, "tasks", "validate", "harbor-mini", "--backend", "local", "--workers", "2",
                           "--instances", ",".join([*HOST, "git-tag", "compose-token"]), "--format", "json"],
                          capture_output=True, text=True, timeout=600)
    results = {r["task_id"]: r for r in json.loads(proc.stdout)["results"]}
    assert all(results[t]["valid"] for t in HOST), proc.stdout
    gold = results["git-tag"]["verdicts"][0]
    assert gold["category"] == "needs_image" and "RUN" in gold["error"]
    gold = results["compose-token"]["verdicts"][0]
    assert gold["category"] == "unsupported" and "cannot start side services" in gold["error"], gold
    assert proc.returncode == 1  # git-tag and compose-token are not valid here, and say why
    home = os.environ["ORCHARD_HOME"]
    left = os.listdir(os.path.join(home, "harbor-host")) if os.path.isdir(os.path.join(home, "harbor-host")) else []
    assert left == []
