"""A docker sandbox's side services (spec.services): containers started before it, on a network
of its own, reached from it by their names, removed with it.

    start(api, sandbox_id, spec, labels)  the network `orchard-<id>-net` and one container per
                                          service (`orchard-<id>-svc-<name>`), each started once
                                          the services it depends on meet their conditions
                                          (running; healthy; exited 0), and each running (and
                                          healthy, when it has a health check; a one-shot job:
                                          exited 0) before it returns; the network's name
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
SETTLE = 0.5
"""Seconds a side service without a health check must have run before the sandbox starts (one that
exits at once is caught, not seen running in its first instant)."""


CONDITION = {"service_started": "started", "service_healthy": "healthy", "service_completed_successfully": "completed"}


def network_name(sandbox_id: str) -> str:
    return f"orchard-{sandbox_id}-net"


def container_name(sandbox_id: str, service: str) -> str:
    """`orchard-<id>-svc-<name>`: apart from the backend's own (`orchard-<id>`, `-probe`)."""
    return f"orchard-{sandbox_id}-svc-{service}"


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
        made: dict[str, str] = {}
        for service in spec.services:
            for dep, condition in service.depends_on.items():  # compose's order: each dependency first
                _wait(api, dep, made[dep], CONDITION[condition], service.name)
            host_config = api.create_host_config(
                init=True, network_mode=net, nano_cpus=int(min(spec.cpu, cpus) * 1e9),
                mem_limit=spec.memory_bytes, memswap_limit=spec.memory_bytes, pids_limit=spec.pids)
            health = {"test": service.healthcheck, "interval": 1_000_000_000, "timeout": 5_000_000_000,
                      "retries": int(READY_WAIT), "start_period": 0} if service.healthcheck else None
            container = api.create_container(
                service.image, command=service.command, entrypoint=service.entrypoint,
                name=container_name(sandbox_id, service.name), hostname=service.name,
                labels={**labels, SERVICE_LABEL: service.name}, environment=dict(service.env),
                working_dir=service.workdir, user=service.user or "", host_config=host_config,
                healthcheck=health, detach=True,
                networking_config=api.create_networking_config(
                    {net: api.create_endpoint_config(aliases=[service.name])}))
            api.start(container["Id"])
            made[service.name] = container["Id"]
        settled = time.monotonic() + SETTLE
        for service in spec.services:  # every one ready before the sandbox starts
            ready = "completed" if service.completes else "healthy" if service.healthcheck else "started"
            if ready == "started":
                time.sleep(max(0.0, settled - time.monotonic()))
            _wait(api, service.name, made[service.name], ready, None)
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


def _wait(api, name: str, cid: str, condition: str, waiter: str | None) -> None:
    """Until the service `name` is `started` (running), `healthy` or `completed` (exited 0);
    SandboxError when it cannot be (it exited, failed, or took past READY_WAIT)."""
    end = time.monotonic() + READY_WAIT
    for_whom = f" (before {waiter!r} starts)" if waiter else ""
    while True:
        state = api.inspect_container(cid)["State"]
        health = (state.get("Health") or {}).get("Status")
        if condition == "completed":
            if state.get("Status") in ("exited", "dead"):
                if state.get("ExitCode") == 0:
                    return
                raise SandboxError(f"the one-shot side service {name!r} exited {state.get('ExitCode')}{for_whom}: "
                                   f"{_tail(api, cid)}")
        elif not state.get("Running"):
            if condition == "started" and waiter and state.get("Status") == "exited" and state.get("ExitCode") == 0:
                return  # a one-shot job that already did its work has started
            raise SandboxError(f"the side service {name!r} exited at start (exit {state.get('ExitCode')}){for_whom}: "
                               f"{_tail(api, cid)}")
        elif condition == "started" or health == "healthy":
            return
        elif health is None:
            raise SandboxError(f"the side service {name!r} has no health check to wait for{for_whom}")
        if time.monotonic() > end:
            what = "exit" if condition == "completed" else f"pass its health check (health: {health})"
            raise SandboxError(f"the side service {name!r} did not {what} within {READY_WAIT:.0f} s{for_whom}")
        time.sleep(0.25)


def _tail(api, cid: str) -> str:
    return api.logs(cid, tail=5).decode(errors="replace").strip()[-400:] or "no output"


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
