"""Who owns a sandbox: 'host:pid:starttime'. A sandbox whose owner process is gone is an orphan."""

from __future__ import annotations

import os
import socket
from functools import lru_cache


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (/proc stat field 22); None when gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
    except OSError:
        return None
    # Field 22 (starttime) counted after the ')' that closes the command name.
    fields = stat.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):  # a zombie has exited; only its exit status is left
        return None
    return fields[19] if len(fields) > 19 else None


@lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname()


def current_owner() -> str:
    pid = os.getpid()
    return f"{_host()}:{pid}:{process_start_time(pid) or 0}"


def owner_alive(owner: str) -> bool:
    """True when the owner process still runs; owners on other hosts are assumed alive."""
    try:
        host, pid, start = owner.rsplit(":", 2)
        pid_i = int(pid)
    except ValueError:
        return False
    if host != _host():
        return True
    return process_start_time(pid_i) == start
