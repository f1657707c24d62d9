"""Plumbing for the docker backend: safe host-side file access, the proxy bridge, engine exec.

- `HostTree`: the sandbox's workspace and /tmp are host folders bound into the container, so files
  are read and written host-side. Paths are resolved with the sandbox's view of symlinks, and every
  component is opened with O_NOFOLLOW, so a symlink planted in the workspace never leads the host
  process out of it (a path that leads elsewhere in the container is served by an exec instead).
- `ProxyBridge`: with network='proxy' the container has no network at all; the agent inside
  forwards 127.0.0.1:PORT to a Unix socket in the control folder, and this bridge, on the host,
  forwards that socket to the one allowed proxy URL.
- `engine_exec`: a command through the engine's exec API, used when the image has no python3 for
  the agent (or `exec_mode='engine'`), with the same timeout and truncation rules.
"""

from __future__ import annotations

import errno
import os
import posixpath
import socket
import stat
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from orchard_cli.errors import NotFoundError, UsageError

# ---- host-side files -------------------------------------------------------------------------


class HostTree:
    """Sandbox paths below `roots` (sandbox dir -> host dir), accessed without following links out."""

    def __init__(self, roots: dict[str, Path]) -> None:
        # Longest first, so /tmp/work (a workdir below /tmp) wins over /tmp.
        self.roots = dict(sorted(roots.items(), key=lambda kv: -len(kv[0])))

    def _split(self, path: str) -> tuple[str, list[str]] | None:
        for root in self.roots:
            if path == root or path.startswith(root.rstrip("/") + "/"):
                rest = path[len(root):].strip("/")
                return root, [p for p in rest.split("/") if p]
        return None

    def locate(self, path: str) -> tuple[Path, list[str]] | None:
        """(host root, components) for `path` after resolving symlinks as the sandbox would,
        or None when the path leads outside the host-backed folders."""
        todo = [p for p in path.split("/") if p][::-1]
        current: list[str] = []
        hops = 0
        while todo:
            name = todo.pop()
            if name == ".":
                continue
            if name == "..":
                if current:
                    current.pop()
                continue
            candidate = "/" + "/".join([*current, name])
            where = self._split(candidate)
            if where is None:
                if self._is_prefix(candidate):
                    current.append(name)  # still above the roots: '/home' of '/home/me/work'
                    continue
                return None
            root, parts = where
            host = self.roots[root].joinpath(*parts)
            try:
                is_link = stat.S_ISLNK(os.lstat(host).st_mode)
            except OSError:
                is_link = False
            if is_link:
                hops += 1
                if hops > 40:
                    raise UsageError(f"too many levels of symbolic links in {path!r}")
                target = os.readlink(host)
                if target.startswith("/"):
                    current = []
                todo.extend([p for p in target.split("/") if p][::-1])
                continue
            current.append(name)
        where = self._split("/" + "/".join(current))
        if where is None:
            return None
        return self.roots[where[0]], where[1]

    def _is_prefix(self, candidate: str) -> bool:
        return any(root.startswith(candidate.rstrip("/") + "/") for root in self.roots)

    @staticmethod
    def _open_dir(root: Path, parts: list[str], create: bool) -> int:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for part in parts:
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read(self, root: Path, parts: list[str], shown: str) -> bytes:
        if not parts:
            raise UsageError(f"{shown} is a directory")
        try:
            dfd = self._open_dir(root, parts[:-1], create=False)
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
            finally:
                os.close(dfd)
        except FileNotFoundError as exc:
            raise NotFoundError(f"no file {shown!r} in the sandbox") from exc
        except OSError as exc:
            raise self._refuse(exc, shown) from exc
        with os.fdopen(fd, "rb") as fh:
            if stat.S_ISDIR(os.fstat(fh.fileno()).st_mode):
                raise UsageError(f"{shown} is a directory")
            return fh.read()

    def write(self, root: Path, parts: list[str], data: bytes, mode: int, shown: str) -> None:
        if not parts:
            raise UsageError(f"{shown} is a directory")
        try:
            dfd = self._open_dir(root, parts[:-1], create=True)
            try:
                fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                             mode & 0o7777, dir_fd=dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise self._refuse(exc, shown) from exc
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), mode & 0o7777)

    @staticmethod
    def _refuse(exc: OSError, shown: str) -> UsageError:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link swapped in under us
            return UsageError(f"{shown!r} crosses a symbolic link or a non-directory")
        if exc.errno == errno.EISDIR:
            return UsageError(f"{shown} is a directory")
        return UsageError(f"cannot access {shown!r}: {exc.strerror}")


# ---- the proxy bridge ------------------------------------------------------------------------


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class ProxyBridge:
    """Unix socket (host end of the sandbox's proxy port) -> the proxy's TCP address."""

    def __init__(self, sock_path: Path, proxy_url: str) -> None:
        parts = urlsplit(proxy_url)
        self.address = (parts.hostname or "127.0.0.1",
                        parts.port or (443 if parts.scheme == "https" else 80))
        self.path = sock_path
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(sock_path))
        os.chmod(sock_path, 0o666)
        self._listener.listen(128)
        self._listener.settimeout(0.5)
        threading.Thread(target=self._serve, name=f"orchard-bridge-{sock_path.parent.name}",
                         daemon=True).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._connect, args=(conn,), daemon=True).start()

    def _connect(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        try:
            upstream = socket.create_connection(self.address, timeout=10)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        t = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
        t.start()
        _pump(conn, upstream)
        t.join()
        conn.close()
        upstream.close()

    def close(self) -> None:
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass


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


def sandbox_join(*parts: str) -> str:
    return posixpath.join(*parts)
