"""Shared fixtures. Every test gets its own ORCHARD_HOME; nothing touches the user's state."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


@pytest.fixture(autouse=True)
def _orchard_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("orchard-home")
    monkeypatch.setenv("ORCHARD_HOME", str(home))
    monkeypatch.delenv("ORCHARD_ENV_URL", raising=False)
    monkeypatch.delenv("ORCHARD_ENV_KEY", raising=False)
    yield home


def _docker_up() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    need_docker = any("docker" in item.keywords for item in items)
    docker_ok = _docker_up() if need_docker else True
    bwrap_ok = shutil.which("bwrap") is not None
    k8s_ok = bool(os.environ.get("KUBECONFIG"))
    for item in items:
        if "docker" in item.keywords and not docker_ok:
            item.add_marker(pytest.mark.skip(reason="needs a running Docker engine (start dockerd)"))
        if "bwrap" in item.keywords and not bwrap_ok:
            item.add_marker(pytest.mark.skip(reason="needs bubblewrap (apt-get install bubblewrap)"))
        if "k8s" in item.keywords and not k8s_ok:
            item.add_marker(pytest.mark.skip(reason="needs a real Kubernetes cluster: set KUBECONFIG"))
