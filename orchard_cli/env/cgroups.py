"""cgroup limits (memory, pids, cpu) for local sandboxes, on cgroup v1 or v2.

`detect()` finds what this process may use, once:

- **v2** (unified hierarchy): a sandbox's cgroup is `<parent>/orchard-<id>`, where the parent is
  `ORCHARD_CGROUP_PARENT` if set, else this process's own cgroup. The parent must have
  the memory and pids controllers and be able to hand them down (`cgroup.subtree_control`), which
  v2 forbids for a non-root cgroup that holds processes: run orchard in a delegated cgroup
  (`systemd-run --user --scope -p Delegate=yes orchard ...`) or point ORCHARD_CGROUP_PARENT at one.
- **v1** (one hierarchy per controller): `<mount>/<own cgroup>/orchard-<id>` in the memory, pids
  and (when mounted) cpu hierarchies.

Sandboxes sit directly beside this process, not under a shared `orchard` folder: in the cpu
controller a shared parent would make all sandboxes one scheduling entity, and on a busy machine
each command's wake-up would wait for it (measured: exec of `true` 11 ms instead of 2.8 ms).
- otherwise **none**, with the reason; the caller reports `limits='none: <reason>'`.

A sandbox's processes join its cgroups before bwrap starts (`join_prefix`), so every command is
inside from its first instruction; `kill_and_remove` SIGKILLs whatever is left and removes them.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from orchard_cli.errors import SandboxError

NEEDED = ("memory", "pids")
PREFIX = "orchard-"
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class CgroupSupport:
    mode: str
    """'cgroup-v1', 'cgroup-v2' or 'none'."""
    reason: str = ""
    parents: dict[str, Path] = field(default_factory=dict)
    """controller (v1) or 'unified' (v2) -> the cgroup that holds the sandboxes' cgroups."""

    @property
    def label(self) -> str:
        return self.mode if self.mode != "none" else f"none: {self.reason}"

    @property
    def usable(self) -> bool:
        return self.mode != "none"


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) for every cgroup mount."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        found.append((tail[0], fields[3], point, set(tail[2].split(","))))
    return found


def _relative(path: str, mount_root: str) -> str:
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root):]
    return path.strip("/")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _try_v2(point: str, own: str) -> tuple[Path | None, str]:
    parent = Path(os.environ.get("ORCHARD_CGROUP_PARENT") or Path(point) / own)
    available = set(_read(parent / "cgroup.controllers").split())
    missing = [c for c in NEEDED if c not in available]
    if missing:
        return None, f"cgroup v2 controllers {', '.join(missing)} are not available in {parent}"
    wanted = [c for c in (*NEEDED, "cpu") if c in available]
    try:
        if not set(wanted) <= set(_read(parent / "cgroup.subtree_control").split()):
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
    except OSError as exc:
        return None, (f"cannot delegate cgroup v2 controllers below {parent} ({exc.strerror}); run "
                      "orchard in a delegated cgroup or set ORCHARD_CGROUP_PARENT")
    return parent, ""


def _try_v1(mounts, own_paths: dict[str, str]) -> tuple[dict[str, Path], str]:
    parents: dict[str, Path] = {}
    for controller in (*NEEDED, "cpu"):
        mount = next((m for m in mounts if m[0] == "cgroup" and controller in m[3]), None)
        if mount is None or controller not in own_paths:
            if controller in NEEDED:
                return {}, f"no cgroup v1 {controller} hierarchy is mounted"
            continue
        own = Path(mount[2]) / _relative(own_paths[controller], mount[1])
        if not os.access(own, os.W_OK):
            if controller in NEEDED:
                return {}, f"cgroup {own} is not writable"
            continue
        parents[controller] = own
    return parents, ""


@lru_cache(maxsize=1)
def detect() -> CgroupSupport:
    """What this process can use for sandbox limits (cached; cheap file reads)."""
    return detect_from(_read(Path("/proc/self/mountinfo")), _read(Path("/proc/self/cgroup")))


def detect_from(mountinfo: str, proc_cgroup: str) -> CgroupSupport:
    """`detect()` given the texts of /proc/self/mountinfo and /proc/self/cgroup."""
    mounts = _mounts(mountinfo)
    own_paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else ["unified"]:
                own_paths[controller] = parts[2]
    reasons = []
    unified = next((m for m in mounts if m[0] == "cgroup2"), None)
    if unified is not None and "unified" in own_paths:
        base, reason = _try_v2(unified[2], _relative(own_paths["unified"], unified[1]))
        if base is not None:
            return CgroupSupport("cgroup-v2", parents={"unified": base})
        reasons.append(reason)
    parents, reason = _try_v1(mounts, own_paths)
    if parents:
        return CgroupSupport("cgroup-v1", parents=parents)
    reasons.append(reason or "no cgroup hierarchy is mounted")
    return CgroupSupport("none", reason="; ".join(reasons))


def create(support: CgroupSupport, name: str, *, memory: int, pids: int, cpu: float) -> list[str]:
    """Make the sandbox's cgroups with its limits; returns their folders."""
    made: list[str] = []
    quota = max(int(cpu * CPU_PERIOD_US), 1000)
    try:
        for controller, parent in support.parents.items():
            path = parent / f"{PREFIX}{name}"
            path.mkdir()
            made.append(str(path))
            if support.mode == "cgroup-v2":
                _write(path / "memory.max", memory)
                _write(path / "memory.swap.max", 0, optional=True)
                _write(path / "pids.max", pids)
                _write(path / "cpu.max", f"{quota} {CPU_PERIOD_US}", optional=True)
            elif controller == "memory":
                _write(path / "memory.limit_in_bytes", memory)
                _write(path / "memory.memsw.limit_in_bytes", memory, optional=True)
            elif controller == "pids":
                _write(path / "pids.max", pids)
            elif controller == "cpu":
                _write(path / "cpu.cfs_period_us", CPU_PERIOD_US)
                _write(path / "cpu.cfs_quota_us", quota)
    except OSError as exc:
        kill_and_remove(made)
        raise SandboxError(f"cannot set up the sandbox's cgroup: {exc}") from exc
    return made


def _write(path: Path, value, optional: bool = False) -> None:
    if optional and not path.exists():
        return
    path.write_text(str(value))


def join_prefix(dirs: list[str]) -> list[str]:
    """argv prefix that moves the process into `dirs` and then execs the rest of the argv."""
    if not dirs:
        return []
    script = ('while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '
              'exec "$@"')
    return ["/bin/sh", "-c", script, "orchard-cgroup",
            *[str(Path(d) / "cgroup.procs") for d in dirs], "--"]


def procs(dirs: list[str]) -> set[int]:
    pids: set[int] = set()
    for d in dirs:
        pids.update(int(p) for p in _read(Path(d) / "cgroup.procs").split())
    return pids


def kill_and_remove(dirs: list[str], timeout: float = 10.0) -> None:
    """SIGKILL every process in `dirs`, then remove them. Idempotent; raises if they stay busy."""
    dirs = [d for d in dirs if os.path.isdir(d)]
    if not dirs:
        return
    for d in dirs:
        kill_file = Path(d) / "cgroup.kill"
        if kill_file.exists():
            try:
                kill_file.write_text("1")
            except OSError:
                pass
    deadline = time.monotonic() + timeout
    delay, rounds = 0.0005, 0
    while True:
        alive = procs(dirs)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        left = []
        for d in dirs:
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(d)
        dirs = left
        if not dirs:
            return
        if time.monotonic() > deadline:
            raise SandboxError(f"cgroups {', '.join(dirs)} are still busy after {timeout:.0f}s")
        time.sleep(delay)
        rounds += 1
        if rounds > 20:     # killed processes are usually gone within a few ms
            delay = min(delay * 2, 0.05)


def oom_kills(dirs: list[str]) -> int:
    """How many processes the memory limit of these cgroups has killed so far (v2 memory.events,
    v1 memory.oom_control; 0 where neither says). Asked before every command: only the files that
    exist are read (looked up once per set of folders), by plain reads (~30 us, not ~180)."""
    total = 0
    for name in _oom_files(tuple(dirs)):
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        finally:
            os.close(fd)
        for line in data.decode("ascii", "replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                total += int(value)
    return total


@lru_cache(maxsize=1024)
def _oom_files(dirs: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{d}/{name}" for d in dirs for name in ("memory.events", "memory.oom_control")
                 if os.path.exists(f"{d}/{name}"))


def memory_dirs_of(pid: int) -> list[str]:
    """The memory cgroup folder(s) of a process (another container's, say), from /proc/PID/cgroup."""
    mounts = _mounts(_read(Path("/proc/self/mountinfo")))
    found = []
    for line in _read(Path(f"/proc/{pid}/cgroup")).splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not (parts[1] == "" or "memory" in parts[1].split(",")):
            continue
        for kind, root, point, options in mounts:
            if (parts[1] == "" and kind == "cgroup2") or (kind == "cgroup" and "memory" in options):
                folder = Path(point) / _relative(parts[2], root)
                if folder.is_dir():
                    found.append(str(folder))
    return found
