"""A docker sandbox's side services (spec.services): containers started before it, on a network
of its own, reached from it by their names, removed with it.

    start(api, sandbox_id, spec, labels)  the network `orchard-<id>-net` and one container per
                                          service, each running (and healthy, when it has a
                                          health check) before it returns; the network's name
    remove(api, sandbox_id)               every container and the network of `sandbox_id`,
                                          found by label (an orphan's too: `env gc` calls it)

The network is `internal` (no route out of the host) and the host takes no address on it
(`inhibit_ipv4`: its own ports are out of reach too) unless the sandbox's network is 'full'.
Each side container carries the sandbox's labels (`orchard.sandbox_id`, owner, expiry), so
`DockerBackend.resources()` lists it under the sandbox and gc reaps it when its client is gone.
It has the sandbox's cpu, memory and pids limits, its own; nothing of the host is bound into it.
"""

from __future__ import annotations

import time

from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import SandboxError, UsageError

SERVICE_LABEL = "orchard.service"
INHIBIT = "com.docker.network.bridge.inhibit_ipv4"
"""The host takes no address on a private network: the host's own ports are out of reach too."""
READY_WAIT = 120.0
"""Seconds a side service may take to run (and pass its health check)."""


def network_name(sandbox_id: str) -> str:
    return f"orchard-{sandbox_id}-net"


def start(api, sandbox_id: str, spec: SandboxSpec, labels: dict[str, str], cpus: float) -> str:
    """The private network and the side services on it, ready; raises (after removing what it
    made) when one cannot start."""
    import docker.errors

    net = network_name(sandbox_id)
    try:
        private = spec.network != "full"
        api.create_network(net, driver="bridge", internal=private, check_duplicate=True,
                           options={INHIBIT: "true"} if private else None,
                           labels={**labels, SERVICE_LABEL: "network"})
        made = []
        for service in spec.services:
            host_config = api.create_host_config(
                init=True, network_mode=net, nano_cpus=int(min(spec.cpu, cpus) * 1e9),
                mem_limit=spec.memory_bytes, memswap_limit=spec.memory_bytes, pids_limit=spec.pids)
            health = {"test": service.healthcheck, "interval": 1_000_000_000, "timeout": 5_000_000_000,
                      "retries": int(READY_WAIT), "start_period": 0} if service.healthcheck else None
            container = api.create_container(
                service.image, command=service.command, entrypoint=service.entrypoint,
                name=f"orchard-{sandbox_id}-{service.name}", hostname=service.name,
                labels={**labels, SERVICE_LABEL: service.name}, environment=dict(service.env),
                working_dir=service.workdir, user=service.user or "", host_config=host_config,
                healthcheck=health, detach=True,
                networking_config=api.create_networking_config(
                    {net: api.create_endpoint_config(aliases=[service.name])}))
            api.start(container["Id"])
            made.append((service.name, container["Id"], bool(service.healthcheck)))
        _wait_ready(api, made)
    except docker.errors.APIError as exc:
        remove(api, sandbox_id)
        reason = (exc.explanation or str(exc)).strip().splitlines()[0][:300]
        if exc.is_client_error():
            raise UsageError(f"docker refused to start a side service of the sandbox: {reason}") from None
        raise SandboxError(f"docker could not start a side service of the sandbox: {reason}") from None
    except BaseException:
        remove(api, sandbox_id)
        raise
    return net


def _wait_ready(api, made: list[tuple[str, str, bool]]) -> None:
    end = time.monotonic() + READY_WAIT
    pending = list(made)
    while pending:
        name, cid, checked = pending[0]
        state = api.inspect_container(cid)["State"]
        health = (state.get("Health") or {}).get("Status")
        if not state.get("Running"):
            logs = api.logs(cid, tail=5).decode(errors="replace").strip()
            raise SandboxError(f"the side service {name!r} exited at start (exit {state.get('ExitCode')}): "
                               f"{logs[-400:] or 'no output'}")
        if not checked or health == "healthy":
            pending.pop(0)
            continue
        if time.monotonic() > end:
            raise SandboxError(f"the side service {name!r} did not pass its health check within "
                               f"{READY_WAIT:.0f} s (health: {health})")
        time.sleep(0.25)


def remove(api, sandbox_id: str) -> None:
    """Every side container of `sandbox_id` and its network, whoever made them. Idempotent."""
    import docker.errors

    for c in api.containers(all=True, filters={"label": [f"orchard.sandbox_id={sandbox_id}", SERVICE_LABEL]}):
        try:
            api.remove_container(c["Id"], force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: its removal is already under way
                raise
    net = network_name(sandbox_id)
    for n in api.networks(names=[net]):
        if n.get("Name") != net:  # the engine's filter matches parts of names
            continue
        for attempt in range(20):
            try:
                api.remove_network(n["Id"])
                break
            except docker.errors.NotFound:
                break
            except docker.errors.APIError as exc:  # the sandbox's container, killed, not yet gone
                if exc.status_code not in (403, 409) or attempt == 19:
                    raise
                for cid in (api.inspect_network(n["Id"]).get("Containers") or {}):
                    try:
                        api.disconnect_container_from_network(cid, n["Id"], force=True)
                    except docker.errors.APIError:
                        pass
                time.sleep(0.1)
