"""No secret of the host reaches a sandbox: files only their owner may read, planted in a
temporary HOME and in a folder outside the system temp dirs, and /etc/shadow, on the local and the
docker backend, in every network mode, with the harnesses' folders bound in as agents have them."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import ExecRequest, SandboxSpec
from orchard_cli.harnesses.codex import Codex
from orchard_cli.harnesses.openclaw import OpenClaw

BACKENDS = {"local": pytest.mark.bwrap, "docker": pytest.mark.docker}


@pytest.fixture(scope="module")
def planted():
    """Two 0600 files with a token each: in a temporary HOME below /root, and in a folder below
    /srv (neither is a temp dir); and the first line of the host's /etc/shadow."""
    token = secrets.token_hex(16)
    home = Path(tempfile.mkdtemp(prefix="orchard-home-", dir=os.path.expanduser("~")))
    outside = Path(tempfile.mkdtemp(prefix="orchard-secret-", dir="/srv"))
    files = []
    for folder, name in ((home, ".npmrc"), (outside, "key.pem")):
        path = folder / name
        path.write_text(f"//registry.example/:_authToken={token}\n")
        path.chmod(0o600)
        files.append(path)
    shadow = Path("/etc/shadow").read_text().splitlines()[0]
    yield {"token": token, "files": files, "shadow": shadow, "home": home}
    shutil.rmtree(home)
    shutil.rmtree(outside)


def _spec_kwargs(backend: str) -> dict:
    if backend == "local":
        return {}
    from orchard_cli.env.images import ensure_base_image

    return {"image": ensure_base_image()}


@pytest.mark.parametrize("backend", [pytest.param(b, marks=m) for b, m in BACKENDS.items()])
def test_no_host_secret_is_readable_from_a_sandbox(backend, planted, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(planted["home"]))
    mounts = list({m.target: m for m in [*Codex().mounts(), *OpenClaw().mounts()]}.values())  # node once
    assert mounts, "the harnesses are installed (scripts/install-harnesses.sh)"
    reads = " ; ".join(f"cat {p} 2>/dev/null" for p in planted["files"])
    command = f"{reads} ; head -1 /etc/shadow 2>/dev/null ; cat ~/.npmrc /root/.npmrc 2>/dev/null ; true"
    with EnvManager(backend) as env:
        for network in ("none", "proxy", "full"):
            spec = SandboxSpec(network=network, mounts=mounts, env={"HOME": str(planted["home"])},
                               proxy_url="http://127.0.0.1:9" if network == "proxy" else None,
                               **_spec_kwargs(backend))
            info = env.create_sandbox(spec)
            try:
                job = env.exec(info.sandbox_id, ExecRequest(command=command, wait=True, timeout_seconds=60))
                job = env.wait_job(job.job_id, 120)
                assert job.ok, job
                shown = job.stdout + job.stderr
                assert planted["token"] not in shown, f"{backend}/{network}: a planted secret was read"
                assert planted["shadow"] not in shown, f"{backend}/{network}: the host's /etc/shadow was read"
                probe = env.exec(info.sandbox_id, ExecRequest(
                    command="ls /opt/orchard/harnesses && echo harnesses-bound", wait=True, timeout_seconds=60))
                assert "harnesses-bound" in env.wait_job(probe.job_id, 120).stdout  # the mounts were there
            finally:
                env.delete_sandbox(info.sandbox_id)


@pytest.mark.bwrap
def test_bundled_task_data_is_hidden_from_host_sandboxes(monkeypatch):
    """A system install keeps orchard's task folders (tests, gold solutions) under /usr or /opt,
    which 'host' sandboxes show: they are hidden. The package's own folder is on the list, and a
    folder under /opt standing in for it cannot be read from a sandbox."""
    from orchard_cli.env import local

    assert any((path / "harbor-mini").is_dir() for path in local.task_data())
    stand_in = Path(tempfile.mkdtemp(prefix="orchard-taskdata-", dir="/opt"))
    try:
        (stand_in / "solve.sh").write_text("echo the-gold-solution\n")
        (stand_in / "solve.sh").chmod(0o644)
        monkeypatch.setattr(local, "task_data", lambda: [stand_in])
        with EnvManager("local") as env:
            info = env.create_sandbox(SandboxSpec(network="none"))
            try:
                job = env.exec(info.sandbox_id, ExecRequest(command=f"cat {stand_in}/solve.sh; ls /opt",
                                                            wait=True, timeout_seconds=60))
                job = env.wait_job(job.job_id, 120)
                assert "the-gold-solution" not in job.stdout and stand_in.name not in job.stdout, job
                assert job.stdout.strip() or job.stderr, "the sandbox ran"
            finally:
                env.delete_sandbox(info.sandbox_id)
    finally:
        shutil.rmtree(stand_in)
