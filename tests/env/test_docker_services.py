"""Side services (spec.services) on the docker backend, against the real engine: started before the
sandbox and reached from it by name on a network of its own, which reaches neither the internet
nor the host's ports; removed with the sandbox, and reaped by gc when its owner is killed -9.
The local and kubernetes backends refuse them by name."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from orchard_cli.env.images import docker_client, ensure_base_image
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import ExecRequest, SandboxSpec
from orchard_cli.errors import UsageError

HEALTH = ["CMD", "python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080', timeout=2)"]
# from the sandbox: the service by name, then the host's port on the network's first address (the
# gateway a bridge would give the host), then an address on the internet
PROBE = """python3 - <<'PY'
import socket, urllib.request
print(urllib.request.urlopen('http://api:8080/', timeout=10).status)
gateway = socket.gethostbyname('api').rsplit('.', 1)[0] + '.1'
for url in (f'http://{gateway}:%d/' % PORT, 'http://1.1.1.1/'):
    try:
        urllib.request.urlopen(url, timeout=3)
        print('reached', url)
    except Exception:
        print('unreachable')
PY"""
OWNER_SCRIPT = """
import sys, time
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import SandboxSpec
env = EnvManager("docker")
spec = SandboxSpec.model_validate({"image": sys.argv[1], "services": [
    {"name": "api", "image": sys.argv[1], "command": ["sleep", "600"]}]})
print(env.create_sandbox(spec).sandbox_id, flush=True)
time.sleep(600)
"""


def spec(base: str, **kw) -> SandboxSpec:
    return SandboxSpec.model_validate({"image": base, "services": [
        {"name": "api", "image": base, "command": ["python3", "-m", "http.server", "8080"],
         "workdir": "/srv", "healthcheck": HEALTH}], **kw})


def of(sid: str) -> tuple[list, list]:
    api = docker_client().api
    return (api.containers(all=True, filters={"label": f"orchard.sandbox_id={sid}"}),
            [n for n in api.networks(names=[f"orchard-{sid}-net"]) if n["Name"] == f"orchard-{sid}-net"])


@pytest.mark.docker
@pytest.mark.parametrize("network", ["none", "full"])
def test_side_service_reached_by_name_and_removed_with_the_sandbox(network):
    import http.server
    import threading

    base = ensure_base_image()
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with EnvManager("docker") as env:
            info = env.create_sandbox(spec(base, network=network))
            containers, networks = of(info.sandbox_id)
            assert len(containers) == 2 and len(networks) == 1
            assert networks[0]["Internal"] is (network != "full")
            job = env.exec(info.sandbox_id, ExecRequest(command=PROBE.replace("PORT", str(server.server_port)),
                                                        wait=True, timeout_seconds=60))
            lines = job.stdout.split()
            assert lines[0] == "200", job.stdout + job.stderr
            if network == "none":  # neither the host's ports nor the internet
                assert lines[1:] == ["unreachable", "unreachable"], job.stdout
            env.delete_sandbox(info.sandbox_id)
            deadline = time.monotonic() + 60
            while any(of(info.sandbox_id)) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert of(info.sandbox_id) == ([], [])
    finally:
        server.shutdown()


@pytest.mark.docker
def test_a_service_that_exits_fails_the_sandbox_and_leaves_nothing():
    base = ensure_base_image()
    bad = SandboxSpec.model_validate({"image": base, "services": [
        {"name": "db", "image": base, "command": ["sh", "-c", "echo no config >&2; exit 3"]}]})
    with EnvManager("docker") as env:
        with pytest.raises(Exception, match="side service 'db' exited at start.*no config"):
            env.create_sandbox(bad, sandbox_id="sb-svc-exits")
        assert of("sb-svc-exits") == ([], [])


@pytest.mark.docker
def test_gc_reaps_the_services_of_a_killed_owner(_orchard_home):
    owner = subprocess.Popen([sys.executable, "-c", OWNER_SCRIPT, ensure_base_image()], stdout=subprocess.PIPE,
                             text=True)
    try:
        sid = owner.stdout.readline().strip()
        containers, networks = of(sid)
        assert sid.startswith("sb-") and len(containers) == 2 and len(networks) == 1
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    with EnvManager("docker") as env:
        assert sid in env.gc()
    assert of(sid) == ([], [])


def test_services_are_refused_by_name_where_they_cannot_run(tmp_path):
    from orchard_cli.env.kubernetes import KubernetesBackend

    with EnvManager("local") as env:
        assert "services" in env.backend.unsupported
        with pytest.raises(UsageError, match="cannot start side services"):
            env.create_sandbox(SandboxSpec.model_validate({"services": [{"name": "db", "image": "x"}]}))
    assert "services" in KubernetesBackend.unsupported
    with pytest.raises(ValueError, match="none of them 'main'"):
        SandboxSpec.model_validate({"services": [{"name": "main", "image": "x"}]})
    with pytest.raises(ValueError, match="with 'drop'"):
        SandboxSpec.model_validate({"network": "drop", "services": [{"name": "db", "image": "x"}]})


@pytest.mark.docker
def test_depends_on_conditions_order_the_start():
    """Compose's start order: `app` starts only once `db` is healthy (its first command reaches db,
    or it exits) and the one-shot `seed` has exited 0 (not expected to stay running); a seed that
    exits non-zero fails the sandbox naming it. A service named `probe` does not collide with the
    backend's own probe container (side containers are `orchard-<id>-svc-<name>`)."""
    base = ensure_base_image()
    reach_db = "import urllib.request; urllib.request.urlopen('http://db:8080', timeout=2)"
    services = [
        {"name": "db", "image": base, "command": ["sh", "-c", "sleep 2; exec python3 -m http.server 8080"],
         "healthcheck": HEALTH},
        {"name": "seed", "image": base, "command": ["sh", "-c", "sleep 1; echo seeded"], "completes": True},
        {"name": "app", "image": base, "command": ["sh", "-c", f'python3 -c "{reach_db}" && exec sleep 600'],
         "depends_on": {"db": "service_healthy", "seed": "service_completed_successfully"}},
        {"name": "probe", "image": base, "command": ["sleep", "600"]},
    ]
    api = docker_client().api
    with EnvManager("docker") as env:
        info = env.create_sandbox(SandboxSpec.model_validate({"image": base, "services": services}))
        sid = info.sandbox_id
        state = {s: api.inspect_container(f"orchard-{sid}-svc-{s}")["State"] for s in ("db", "seed", "app", "probe")}
        assert state["app"]["Running"] and state["db"]["Health"]["Status"] == "healthy" and state["probe"]["Running"]
        assert state["seed"]["Status"] == "exited" and state["seed"]["ExitCode"] == 0
        assert state["app"]["StartedAt"] > state["seed"]["FinishedAt"]  # RFC 3339, same zone: ordered as text
        env.delete_sandbox(sid)
        services[1]["command"] = ["sh", "-c", "echo seed failed >&2; exit 3"]
        with pytest.raises(Exception, match=r"one-shot side service 'seed' exited 3 \(before 'app' starts\).*seed failed"):
            env.create_sandbox(SandboxSpec.model_validate({"image": base, "services": services[:3]}),
                               sandbox_id="sb-svc-seed-fails")
        assert of("sb-svc-seed-fails") == ([], [])
    with pytest.raises(ValueError, match="depends on db, seed, not listed before it"):
        SandboxSpec.model_validate({"image": base, "services": services[2:3]})
