"""Kill a container from this host, as its engine would, and know when everything in it is dead.

A container engine kills a container by sending SIGKILL to the first process of its pid namespace
and then waiting for its own bookkeeping (the runtime's exit event, deleting the task, unmounting):
~35 ms on docker, of which the kill itself is a few. The kernel, when that first process dies,
kills every other process of the namespace and waits for them before the first one's exit is
final, so a pidfd of it that polls readable says that nothing in the container runs any more.
The engine notices the exit on its own and cleans up after it (and removes an auto_remove
container), as it does for a container whose main process exits.

Only where that process is visibly the container's here: the engine on this host, in this pid
namespace, and a caller allowed to signal it. Anything else answers False and changes nothing,
and the caller asks the engine instead.
"""

from __future__ import annotations

import os
import select
import signal


def kill_container(pid: int, container_id: str, timeout: float = 10.0) -> bool:
    """SIGKILL the container's first process (`pid`, as the engine reports it) and wait until it,
    and so every process in its pid namespace, is dead. True once they are; False when nothing
    was done (not this container's process here, not allowed) or it did not die in `timeout`."""
    if pid <= 0 or len(container_id) < 12 or not hasattr(os, "pidfd_open"):
        return False
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # no such process here: another pid namespace, another host
        return False
    try:
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                if container_id not in f.read():
                    return False
        except OSError:
            return False
        if _dead(fd, 0):  # died meanwhile: what /proc said may have been another process's
            return False
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:  # it exited this instant: the namespace goes with it
            pass
        except OSError:  # not allowed (another user's engine)
            return False
        return _dead(fd, timeout)
    finally:
        os.close(fd)


def _dead(pidfd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(int(timeout * 1000)))
