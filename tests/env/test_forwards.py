"""spec.forwards beyond the conformance check: validation, refusals, low ports, cleanup, 'drop'."""

from __future__ import annotations

import threading
import time

import pytest
from pydantic import ValidationError

from orchard_cli.env import local
from orchard_cli.env.conformance import GREETING, _greeting, _refused_inside, line_server, ok
from orchard_cli.env.kubernetes import KubernetesBackend
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import PortForward, SandboxSpec
from orchard_cli.errors import UsageError

FWD = [{"port": 1143, "target": "127.0.0.1:40123"}]


def test_the_field_and_its_target():
    spec = SandboxSpec(network="drop", forwards=[*FWD, {"port": 5232, "target": "[::1]:8080"}])
    assert spec.forwards == [PortForward(port=1143, target="127.0.0.1:40123"),
                             PortForward(port=5232, target="[::1]:8080")]
    assert [f.address for f in spec.forwards] == [("127.0.0.1", 40123), ("::1", 8080)]
    assert SandboxSpec().forwards == [] and SandboxSpec(forwards=None).forwards == []
    assert SandboxSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize(("fields", "message"), [
    ({"network": "full", "forwards": FWD}, "forwards need an isolated network"),
    ({"block_network": False, "forwards": FWD}, "forwards need an isolated network"),
    ({"forwards": [*FWD, {"port": 1143, "target": "127.0.0.1:1"}]}, "port 1143 more than once"),
    ({"network": "proxy", "proxy_url": "http://127.0.0.1:9", "forwards": [
        {"port": 3128, "target": "127.0.0.1:1"}]}, "port 3128 is where"),
    ({"forwards": [{"port": 0, "target": "127.0.0.1:1"}]}, "greater than or equal to 1"),
    ({"forwards": [{"port": 65536, "target": "127.0.0.1:1"}]}, "less than or equal to 65535"),
    ({"forwards": [{"port": 1143, "target": "127.0.0.1"}]}, "is not 'host:port'"),
    ({"forwards": [{"port": 1143, "target": "imap://127.0.0.1:1"}]}, "is not 'host:port'"),
    ({"forwards": [{"port": 1143, "target": "127.0.0.1:70000"}]}, "is not 'host:port'"),
    ({"forwards": [{"port": 1143, "target": "127.0.0.1:1", "host": "x"}]}, "Extra inputs"),
])
def test_bad_forwards_are_refused_with_one_message(fields, message):
    with pytest.raises(ValidationError, match=message) as err:
        SandboxSpec(**fields)
    assert err.value.error_count() == 1


def test_3128_is_fine_without_a_proxy():
    assert SandboxSpec(forwards=[{"port": 3128, "target": "127.0.0.1:1"}]).forwards[0].port == 3128


def test_kubernetes_lists_forwards_unsupported_and_refuses_them():
    backend = KubernetesBackend(api_client=object())
    assert "forwards" in backend.unsupported
    with pytest.raises(UsageError, match="cannot forward ports") as err:
        backend.create("sb-x", SandboxSpec(forwards=FWD), "me", time.time() + 60)
    assert "\n" not in str(err.value)


@pytest.mark.bwrap
def test_local_without_bwrap_refuses_forwards(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    monkeypatch.setenv("ORCHARD_ALLOW_NO_ISOLATION", "1")
    monkeypatch.setattr(local, "_warned", True)
    with EnvManager("local", root=str(tmp_path / "local")) as env:
        assert "forwards" in env.backend.unsupported
        with pytest.raises(UsageError, match="bubblewrap") as err:
            env.create_sandbox(SandboxSpec(forwards=FWD))
        assert "apt-get install bubblewrap" in err.value.hint
        assert env.list_sandboxes() == []


@pytest.fixture()
def local_env(tmp_path):
    manager = EnvManager("local", root=str(tmp_path / "local"))
    yield manager
    manager.close()


def _relay_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("orchard-relay-")]


@pytest.mark.bwrap
def test_local_low_port_fails_clearly_and_leaves_nothing(local_env):
    with pytest.raises(UsageError, match=r"cannot listen on 127\.0\.0\.1:143 in the sandbox") as err:
        local_env.create_sandbox(SandboxSpec(forwards=[{"port": 143, "target": "127.0.0.1:1"}]))
    assert "above 1023" in err.value.hint
    assert list(local_env.backend.root.iterdir()) == []
    assert local_env.list_sandboxes() == []


@pytest.mark.bwrap
def test_local_relays_close_with_the_sandbox_and_the_proxy_port_is_free(local_env):
    with line_server() as (port, seen):
        forwards = [{"port": p, "target": f"127.0.0.1:{port}"} for p in (1025, 1143, 5232)]
        spec = SandboxSpec(network="proxy", proxy_url="http://127.0.0.1:9/v1", forwards=forwards)
        before = set(_relay_threads())
        sid = local_env.create_sandbox(spec).sandbox_id
        assert len(set(_relay_threads()) - before) == 4  # three forwards and the proxy
        for p in (1025, 1143, 5232):
            assert ok(local_env, sid, _greeting(p)).strip() == GREETING
        url = ok(local_env, sid, 'echo "$ORCHARD_PROXY_URL"').strip()
        assert url.endswith("/v1") and int(url.split(":")[2].split("/")[0]) not in (1025, 1143, 5232)
        local_env.delete_sandbox(sid)
        deadline = time.monotonic() + 5
        while set(_relay_threads()) - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not set(_relay_threads()) - before, "relays outlived their sandbox"
        assert len(seen) == 3


@pytest.mark.bwrap
def test_local_drop_network_with_a_forward(local_env):
    if "network_drop" in local_env.backend.unsupported:
        pytest.skip("network='drop' is not available here (needs root, nsenter and ip)")
    with line_server() as (port, seen):
        spec = SandboxSpec(network="drop", forwards=[{"port": 1143, "target": f"127.0.0.1:{port}"}])
        sid = local_env.create_sandbox(spec).sandbox_id
        assert ok(local_env, sid, _greeting(1143)).strip() == GREETING
        _refused_inside(local_env, sid, [port], "network='drop' + forwards")
        assert len(seen) == 1


@pytest.mark.docker
def test_docker_relays_close_with_the_sandbox():
    from orchard_cli.env.images import ensure_base_image

    with EnvManager("docker") as env, line_server() as (port, seen):
        forwards = [{"port": 143, "target": f"127.0.0.1:{port}"}]  # root in the image may bind it
        sid = env.create_sandbox(SandboxSpec(image=ensure_base_image(), forwards=forwards)).sandbox_id
        channel, relays = env.backend._live[sid]
        assert [r.target for r in relays] == [("127.0.0.1", port)]
        assert ok(env, sid, _greeting(143)).strip() == GREETING
        env.delete_sandbox(sid)
        assert sid not in env.backend._live and all(r._closed for r in relays)
        assert len(seen) == 1


@pytest.mark.docker
def test_docker_forwards_through_the_engine_exec_path():
    """exec_mode='engine' still starts the runner, which holds the forwards' listeners."""
    from orchard_cli.env.conformance import CHECKS
    from orchard_cli.env.docker import DockerBackend
    from orchard_cli.env.images import ensure_base_image

    with EnvManager(DockerBackend(exec_mode="engine")) as env:
        CHECKS["forwards_reach_only_their_target"](env, {"image": ensure_base_image()})
        assert env.list_sandboxes() == []
