"""Plumbing for the docker backend: engine exec and image archives.

- `engine_exec`: a command through the engine's exec API, used when the image has no python3 for
  the runner (or `exec_mode='engine'`), with the same timeout, kill and truncation rules.
- `extract_workdir`: an image's files at the workdir, from the engine's tar stream, into a folder.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from orchard_cli.errors import SandboxError


# ---- exec through the engine -----------------------------------------------------------------


@dataclass
class RawResult:
    exit_code: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    timed_out: bool = False
    duration: float = 0.0
    error: str | None = None
    signal: int | None = None
    leftovers: int | None = None


# $1: a shell command line or '-' for the argv that follows; $2: a file to read stdin from or ''.
_WRAPPER = ('c=$1; i=$2; shift 2; if [ -n "$i" ]; then exec <"$i"; fi; '
            'if [ "$c" = "-" ]; then exec "$@"; fi; '
            'if [ -x /bin/bash ]; then exec /bin/bash -c "$c"; fi; exec /bin/sh -c "$c"')
# Kill every process whose environment carries the marker ($1), until none is left.
_KILLER = ('m=$1; for n in 1 2 3 4 5 6 7 8 9 10; do f=; for d in /proc/[0-9]*; do '
           'p=${d#/proc/}; [ "$p" = "$$" ] && continue; '
           'if tr "\\0" "\\n" <"$d/environ" 2>/dev/null | grep -qx "$m"; then '
           'kill -9 "$p" 2>/dev/null; f=1; fi; done; [ -z "$f" ] && exit 0; done')
MARKER_VAR = "ORCHARD_EXEC_ID"


def engine_exec(api, container: str, command: str | list[str], *, env: dict[str, str], cwd: str,
                stdin: bytes | None, timeout: float, limit: int, ctl_host: Path,
                ctl_sandbox: str) -> RawResult:
    """Run one command with the engine's exec API; kill its whole tree at the deadline."""
    started = time.monotonic()
    exec_id = uuid.uuid4().hex[:16]
    marker = f"{MARKER_VAR}={exec_id}"
    stdin_file = ""
    if stdin is not None:
        (ctl_host / f"stdin-{exec_id}").write_bytes(stdin)
        stdin_file = f"{ctl_sandbox}/stdin-{exec_id}"
    first = command if isinstance(command, str) else "-"
    rest = [] if isinstance(command, str) else list(command)
    argv = ["/bin/sh", "-c", _WRAPPER, "orchard", first, stdin_file, *rest]
    buffers = {0: bytearray(), 1: bytearray()}
    dropped = [0, 0]
    failure: list[str] = []

    def collect(stream) -> None:
        try:
            for chunks in stream:
                for i, chunk in enumerate(chunks):
                    if chunk:
                        room = max(limit - len(buffers[i]), 0)
                        buffers[i] += chunk[:room]
                        dropped[i] += max(len(chunk) - room, 0)
        except Exception as exc:  # the engine went away mid-stream
            failure.append(f"{type(exc).__name__}: {exc}")

    try:
        created = api.exec_create(container, argv, environment={**env, MARKER_VAR: exec_id},
                                  workdir=cwd)
        stream = api.exec_start(created["Id"], stream=True, demux=True)
    except Exception as exc:
        _unlink(ctl_host / f"stdin-{exec_id}")
        return RawResult(exit_code=None, error=f"docker exec failed: {exc}",
                         duration=time.monotonic() - started)
    reader = threading.Thread(target=collect, args=(stream,), daemon=True)
    reader.start()
    reader.join(max(timeout - (time.monotonic() - started), 0))
    timed_out = reader.is_alive()
    if timed_out:
        try:
            kill = api.exec_create(container, ["/bin/sh", "-c", _KILLER, "orchard-kill", marker])
            api.exec_start(kill["Id"])
        except Exception:
            pass
        reader.join(10)
    _unlink(ctl_host / f"stdin-{exec_id}")
    code = None
    for _ in range(100):
        info = api.exec_inspect(created["Id"])
        if not info.get("Running"):
            code = info.get("ExitCode")
            break
        time.sleep(0.02)
    out, err = bytes(buffers[0]), bytes(buffers[1])
    error = failure[0] if failure and not timed_out else None
    if code == 126 and out.startswith(b"OCI runtime exec failed"):
        error = out.decode(errors="replace").strip()
        out = b""
        if "chdir to cwd" in error:
            error = f"working directory {cwd} does not exist"
    return RawResult(exit_code=None if (timed_out or error) else code, stdout=out, stderr=err,
                     stdout_dropped=dropped[0], stderr_dropped=dropped[1], timed_out=timed_out,
                     duration=time.monotonic() - started, error=error)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# ---- image files at the workdir --------------------------------------------------------------


class _IterReader(io.RawIOBase):
    """A raw reader over the engine's chunk iterator (tarfile's stream mode reads it)."""

    def __init__(self, chunks) -> None:
        self._chunks = iter(chunks)
        self._chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._chunk:
            nxt = next(self._chunks, None)
            if nxt is None:
                return 0
            self._chunk = memoryview(nxt)
        n = min(len(buffer), len(self._chunk))
        buffer[:n] = self._chunk[:n]
        self._chunk = self._chunk[n:]
        return n


def extract_workdir(chunks, workdir: str, dest: Path, tar_binary: str | None = "tar") -> None:
    """Unpack the engine's archive of `workdir` into `dest`, which takes the folder's own mode and
    owner. GNU tar when there is one (about twice as fast as tarfile on a repository), else
    tarfile's 'tar' filter; either way numeric owners, and nothing lands outside `dest`."""
    tar_path = shutil.which(tar_binary) if tar_binary else None
    if tar_path:
        # Rename the top folder to '.', but not inside symlink targets (flag S).
        proc = subprocess.Popen([tar_path, "-x", "--numeric-owner", "-C", str(dest),
                                 "--transform=s,^[^/]*,.,S"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            for chunk in chunks:
                proc.stdin.write(chunk)
        except BrokenPipeError:
            pass
        finally:
            proc.stdin.close()
        error = proc.stderr.read().decode(errors="replace").strip()
        if proc.wait() != 0:
            raise SandboxError(f"cannot copy the image's {workdir} into the workspace: {error[-300:]}")
        return
    top = workdir.rstrip("/").rsplit("/", 1)[-1]
    with tarfile.open(fileobj=io.BufferedReader(_IterReader(chunks), 1 << 20), mode="r|") as tar:
        for member in tar:
            if member.name == top:
                if member.isdir():
                    os.chmod(dest, member.mode & 0o7777)
                    if os.geteuid() == 0:
                        os.chown(dest, member.uid, member.gid)
                continue
            if not member.name.startswith(top + "/"):
                continue
            member.name = member.name[len(top) + 1:]
            if member.islnk():
                member.linkname = member.linkname[len(top) + 1:]
            tar.extract(member, dest, set_attrs=True, numeric_owner=True, filter="tar")
