"""Host prerequisites, declared once: what each backend, family and harness needs on this machine,
how to check it, and the line that installs it.

`orchard doctor` lists every entry; a run checks the entries its backend, family and harness
need before anything starts (`require_host`: one line and exit 3, no run folder), so no family
has a second way to find out. The task-family seam names entries of this table in its
`Requirements.host`; keep it importable without importing any family (checks are "module:function"
strings, imported when run).

    name           what it is                                   needed by
    bubblewrap     isolation of the local backend's sandboxes   backend local (every family), the web jail
    git            patches, SWE repositories                    swe, calc
    cgroups        memory / pids limits of local sandboxes      (limits; not required)
    docker         the docker backend: Python client + engine   backend docker
    chromium       the browser of web tasks (PATH too)          web, miniwob, live-web
    playwright     drives Chromium                              web, miniwob, live-web
    miniwob        MiniWoB++'s HTML pages                       miniwob
    claw services  SMTP, IMAP, CalDAV servers                   claw
    node, harness node, codex, openclaw, zeroclaw               the harnesses of those names
    embedded model, torch, transformers                        the smollm2 endpoint, training
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchard_cli.errors import MissingDependencyError

CHROMIUM_ENV = "ORCHARD_CHROMIUM"
DEBIAN_CHROMIUM = ("/usr/lib/chromium/chromium-headless-shell", "/usr/lib/chromium/chromium")
PATH_CHROMIUM = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_INSTALL = "apt-get install -y chromium-headless-shell (or set ORCHARD_CHROMIUM=/path/to/chrome)"
PLAYWRIGHT_INSTALL = "pip install playwright==1.65.0  # never `playwright install`: it drives the system Chromium"
MINIWOB_INSTALL = "pip install --no-deps miniwob==1.1.0"
CLAW_INSTALL = "pip install 'orchard-cli[claw]'"
CLAW_SERVICES = (("aiosmtpd", "aiosmtpd"), ("pymap", "pymap"), ("radicale", "radicale"))
BROWSER_USERS = ("family:web", "family:miniwob", "family:live-web+network:full")
"""The families whose episodes drive a browser (live-web only when it may reach the live web)."""


@dataclass(frozen=True)
class Prereq:
    """One thing a run may need on this machine."""

    name: str
    purpose: str
    check: str
    """'module:function' returning a `doctor.Check` (or a list of them)."""
    needed_by: tuple[str, ...] = ()
    """'backend:local', 'family:web', 'harness:codex'; 'family:live-web+network:full' needs both."""
    required: bool = False
    """The embedded default (local backend + bubblewrap) cannot run without it."""


PREREQS: tuple[Prereq, ...] = (
    Prereq("bubblewrap", "isolates the local backend's sandboxes (and jails the web tasks' browser)",
           "orchard_cli.doctor:check_bubblewrap", ("backend:local",) + BROWSER_USERS,
           required=True),
    Prereq("local backend", "orchard's own sandbox backend", "orchard_cli.doctor:check_local_backend", (), required=True),
    Prereq("cgroups", "memory and process limits of local sandboxes", "orchard_cli.doctor:check_cgroups"),
    Prereq("git", "patches and SWE repositories", "orchard_cli.doctor:check_git", ("family:swe", "family:calc")),
    Prereq("docker", "the docker backend: its Python client and a running engine", "orchard_cli.doctor:check_docker",
           ("backend:docker",)),
    Prereq("chromium", "the browser web tasks drive ($ORCHARD_CHROMIUM, Debian's, or on PATH)",
           "orchard_cli.prereqs:check_chromium", BROWSER_USERS),
    Prereq("playwright", "drives Chromium for web tasks", "orchard_cli.prereqs:check_playwright", BROWSER_USERS),
    Prereq("miniwob", "MiniWoB++'s task pages", "orchard_cli.prereqs:check_miniwob", ("family:miniwob",)),
    Prereq("claw services", "the SMTP, IMAP and CalDAV servers of personal-assistant tasks",
           "orchard_cli.prereqs:check_claw_services", ("family:claw",)),
    Prereq("node", "installs the npm harnesses", "orchard_cli.doctor:check_node"),
    Prereq("harness node", "the pinned Node the npm harnesses run on", "orchard_cli.doctor:check_harness_node",
           ("harness:codex", "harness:openclaw")),
    Prereq("codex", "the Codex CLI harness", "orchard_cli.prereqs:check_codex", ("harness:codex",)),
    Prereq("openclaw", "the OpenClaw harness", "orchard_cli.prereqs:check_openclaw", ("harness:openclaw",)),
    Prereq("zeroclaw", "the ZeroClaw harness", "orchard_cli.prereqs:check_zeroclaw", ("harness:zeroclaw",)),
    Prereq("embedded model", "SmolLM2-135M-Instruct, the default model", "orchard_cli.doctor:check_embedded_model"),
    Prereq("torch", "the embedded model, training, the value model", "orchard_cli.prereqs:check_torch"),
    Prereq("transformers", "the embedded model, training", "orchard_cli.prereqs:check_transformers"),
)


def prereq(name: str) -> Prereq:
    for entry in PREREQS:
        if entry.name == name:
            return entry
    raise KeyError(name)


def run_check(entry: Prereq) -> list[Any]:
    """The entry's checks (`doctor.Check`), run now."""
    module, _, attr = entry.check.partition(":")
    found = getattr(importlib.import_module(module), attr)()
    return found if isinstance(found, list) else [found]


def needed(*, backend: str | None = None, family: str | None = None, harness: str | None = None,
           network: str = "none") -> list[Prereq]:
    """The entries a run with this backend, family, harness and network needs."""
    keys = {f"backend:{backend}", f"family:{family}", f"harness:{harness}", f"family:{family}+network:{network}"}
    unisolated = os.environ.get("ORCHARD_ALLOW_NO_ISOLATION") == "1"  # the local backend runs on the host
    out = []
    for entry in PREREQS:
        why = keys & set(entry.needed_by)
        if why and not (entry.name == "bubblewrap" and why == {"backend:local"} and unisolated):
            out.append(entry)
    return out


def missing(entries: Iterable[Prereq]) -> list[Any]:
    """The failed checks among `entries` (each with its install line in `fix`)."""
    return [c for e in entries for c in run_check(e) if not c.ok]


def require(entries: Iterable[Prereq], what: str) -> None:
    """Every entry here, else one line naming the first missing one (exit 3), its install line
    and the others' in the hint."""
    failed = missing(entries)
    if not failed:
        return
    first = failed[0]
    others = "; ".join(f"{c.name}: {c.fix}" for c in failed[1:])
    raise MissingDependencyError(f"{what} cannot run: {first.name} is not ready here ({first.detail or 'missing'})",
                                 hint=first.fix + (f"; also {others}" if others else "") + "; `orchard doctor` checks them all")


def require_host(*, backend: str | None = None, family: str | None = None, harness: str | None = None,
                 network: str = "none", what: str = "this run") -> None:
    """Before a run starts anything: every host prerequisite its backend, family and harness need."""
    require(needed(backend=backend, family=family, harness=harness, network=network), what)


def doctor_report() -> Any:
    """`orchard doctor`: every entry of the table, checked (`doctor.DoctorReport`)."""
    from orchard_cli.doctor import DoctorReport

    checks = []
    for entry in PREREQS:
        for check in run_check(entry):
            checks.append(check.model_copy(update={"required": entry.required, "needed_by": list(entry.needed_by),
                                                   "purpose": entry.purpose}))
    return DoctorReport(ready=all(c.ok for c in checks if c.required), checks=checks)


# ---- the checks that live here -------------------------------------------------------------------

def _check(**fields: Any) -> Any:
    from orchard_cli.doctor import Check

    return Check(**fields)


def find_chromium() -> str | None:
    """The Chromium binary: $ORCHARD_CHROMIUM, Debian's headless shell or browser, else the first
    of chromium-headless-shell, chromium, chromium-browser, google-chrome on PATH."""
    configured = os.environ.get(CHROMIUM_ENV)
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    for candidate in DEBIAN_CHROMIUM:
        if os.access(candidate, os.X_OK):
            return candidate
    for name in PATH_CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    return None


def check_chromium() -> Any:
    configured = os.environ.get(CHROMIUM_ENV)
    found = find_chromium()
    if found is None:
        detail = (f"${CHROMIUM_ENV}={configured} is not an executable file" if configured else
                  f"not at {' or '.join(DEBIAN_CHROMIUM) or 'the Debian paths'} and none of {', '.join(PATH_CHROMIUM)} on PATH")
        return _check(name="chromium", ok=False, detail=detail, fix=CHROMIUM_INSTALL)
    via = f" (${CHROMIUM_ENV})" if configured else ""
    return _check(name="chromium", ok=True, detail=found + via)


def _module(name: str, dist: str, install: str, label: str | None = None) -> Any:
    from orchard_cli.doctor import _dist_version

    spec = importlib.util.find_spec(name)
    version = _dist_version(dist) if spec else ""
    if spec is None:
        return _check(name=label or dist, ok=False, detail=f"the Python package {dist!r} is not installed", fix=install)
    return _check(name=label or dist, ok=True, version=version, detail=str(Path(spec.origin or name).parent))


def check_playwright() -> Any:
    return _module("playwright", "playwright", PLAYWRIGHT_INSTALL)


def check_miniwob() -> Any:
    spec = importlib.util.find_spec("miniwob")  # the folder, without running its __init__
    root = Path(next(iter(spec.submodule_search_locations or []), "")) if spec else None
    if root is None or not (root / "html" / "core" / "core.js").is_file():
        return _check(name="miniwob", ok=False, detail="MiniWoB++'s HTML (the 'miniwob' package) is not installed",
                      fix=MINIWOB_INSTALL)
    from orchard_cli.doctor import _dist_version

    return _check(name="miniwob", ok=True, version=_dist_version("miniwob"), detail=str(root / "html"))


def check_claw_services() -> Any:
    absent = [dist for module, dist in CLAW_SERVICES if importlib.util.find_spec(module) is None]
    if absent:
        return _check(name="claw services", ok=False, detail=f"not installed: {', '.join(absent)}", fix=CLAW_INSTALL)
    from orchard_cli.doctor import _dist_version

    return _check(name="claw services", ok=True,
                  version=", ".join(f"{d} {_dist_version(d)}" for _, d in CLAW_SERVICES))


def check_codex() -> Any:
    from orchard_cli.doctor import check_harness_adapter

    return check_harness_adapter("codex")


def check_openclaw() -> Any:
    from orchard_cli.doctor import check_harness_adapter

    return check_harness_adapter("openclaw")


def check_zeroclaw() -> Any:
    from orchard_cli.doctor import check_harness_adapter

    return check_harness_adapter("zeroclaw")


def check_torch() -> Any:
    from orchard_cli.doctor import check_python_package
    from orchard_cli.registry import INSTALL_HINTS

    return check_python_package("torch", "torch", INSTALL_HINTS["torch"])


def check_transformers() -> Any:
    from orchard_cli.doctor import check_python_package
    from orchard_cli.registry import INSTALL_HINTS

    return check_python_package("transformers", "transformers", INSTALL_HINTS["transformers"])


__all__ = ["PREREQS", "Prereq", "doctor_report", "find_chromium", "missing", "needed", "prereq", "require", "require_host", "run_check"]
