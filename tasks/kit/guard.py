"""Servers that end with the process that started them, however it ends (a crash, SIGKILL, an
interpreter killed mid-test): each server runs behind a few lines of Python that hold the read end
of a pipe whose write end only the starting process has. When that process is gone, the read sees
end-of-file, and the server gets SIGTERM (then, 5 s later, exits hard).

(PR_SET_PDEATHSIG would do it in one call, but it fires when the *thread* that started the child
ends, and sets are started from worker threads.)
"""

from __future__ import annotations

import os
import subprocess
import sys

ENV = "ORCHARD_GUARD_FD"

LAUNCHER = f"""
import os, runpy, signal, sys, threading, time
fd = int(os.environ.pop({ENV!r}))
def watch():
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    os._exit(1)
threading.Thread(target=watch, daemon=True).start()
target = sys.argv[1]
sys.argv = [target] + sys.argv[2:]
if ":" in target:
    module, function = target.split(":")
    sys.exit(getattr(__import__(module, fromlist=[function]), function)())
runpy.run_module(target, run_name="__main__", alter_sys=True)
"""


def command(target: str, *args: str) -> list[str]:
    """The argv running `target` ('package.module', run as __main__, or 'module:function') behind the guard."""
    return [sys.executable, "-c", LAUNCHER, target, *args]


class Guard:
    """One pipe per service set: `fd` goes to every child (pass_fds, and ENV names it); `close()`
    (or the death of this process) ends them."""

    def __init__(self) -> None:
        self.fd, self._write = os.pipe()

    def env(self) -> dict[str, str]:
        return {ENV: str(self.fd)}

    def close(self) -> None:
        for fd in (self._write, self.fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._write = self.fd = -1


def end(*procs: subprocess.Popen, grace: float = 5.0) -> None:
    """Stop servers started here: SIGTERM to each still running, SIGKILL to any still there
    `grace` seconds later; every one is reaped before this returns."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
