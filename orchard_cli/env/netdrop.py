"""network='drop': a private network whose traffic goes nowhere.

A sandbox with network='none' has only loopback, so a connect to any other address fails at once
(ENETUNREACH). Test suites written for machines with a network expect otherwise: a connect to an
unroutable address *hangs* until its timeout (requests' `test_connect_timeout`), and the official
SWE-bench harness grades with a network. network='drop' gives the sandbox's own network namespace
a default route through its loopback device: a packet to anything but the loopback addresses goes
out on loopback, comes back in addressed to no one and is dropped, so connects wait for their
timeout, while nothing outside the sandbox (the host, its loopback, the LAN, the internet, the
Orchard Env service) is reachable. (No dummy or tun device: kernels without those modules, as in
many containers and VMs, still have loopback.)

Name lookups fail at once, as on a machine whose resolver answers that it cannot: each
nameserver of the sandbox's own /etc/resolv.conf gets an `unreachable` route, so a query to it
fails on send (glibc says "Temporary failure in name resolution" in well under a second) instead
of being dropped and retried for 10 s per lookup (58 lookups of one requests instance took 630 s).
A nameserver on loopback needs nothing: nothing listens there in the sandbox's namespace.

It is set up from outside, by entering the sandbox's network namespace (`nsenter --net`) and
running iproute2's `ip` there: root on the host, or the owner of the sandbox's user namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from orchard_cli.errors import SandboxError

SETUP_TIMEOUT = 30


def available() -> str | None:
    """None when network='drop' can be set up here, else why not."""
    missing = [tool for tool in ("nsenter", "ip") if not shutil.which(tool)]
    if missing:
        return f"needs {' and '.join(missing)} on the host (apt-get install util-linux iproute2)"
    if os.geteuid() != 0:
        return "needs root on the host to enter a sandbox's network namespace"
    return None


def nameservers(pid: int) -> list[str]:
    """The nameserver addresses of the sandbox's /etc/resolv.conf (the host's when unreadable),
    loopback ones left out."""
    import ipaddress

    text = ""
    for path in (f"/proc/{pid}/root/etc/resolv.conf", "/etc/resolv.conf"):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            break
        except OSError:
            continue
    found = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                address = ipaddress.ip_address(words[1].split("%")[0])
            except ValueError:
                continue
            if not address.is_loopback and str(address) not in found:
                found.append(str(address))
    return found


def drop_traffic(pid: int) -> None:
    """Route everything but loopback in the network namespace of `pid` into nowhere, and make
    its nameservers unreachable (a lookup fails at once)."""
    why = available()
    if why:
        raise SandboxError(f"network='drop' {why}")
    script = "ip link set lo up && ip route add default dev lo"
    for address in nameservers(pid):
        script += (f" && {{ ip -6 route add unreachable {address} || true; }}" if ":" in address  # no IPv6 here
                   else f" && ip route add unreachable {address}")
    done = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "sh", "-c", script],
                          capture_output=True, text=True, timeout=SETUP_TIMEOUT)
    if done.returncode != 0:
        raise SandboxError(f"could not set up network='drop' in the sandbox's namespace: "
                           f"{done.stderr.strip()[-300:] or done.returncode}")
