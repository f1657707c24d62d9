"""The Orchard Env API key: one shared secret between the service and its clients.

The key is ORCHARD_ENV_KEY when that is set; otherwise it is generated once and kept in
`ORCHARD_HOME/env/api-key` with mode 0600, which both the service and the client read. The key
appears nowhere else: not in logs, not in `service.json`.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from orchard_cli.errors import AuthError, InfraError
from orchard_cli.home import state_dir

KEY_ENV = "ORCHARD_ENV_KEY"
HEADER = "X-API-Key"


def key_path() -> Path:
    return state_dir("env") / "api-key"


def key_source() -> str:
    """Where the key comes from, for people: 'ORCHARD_ENV_KEY' or the key file's path."""
    return KEY_ENV if os.environ.get(KEY_ENV) else str(key_path())


def _read_file(path: Path) -> str:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise InfraError(f"the API key file {path} is readable by others (mode {mode:o})",
                         hint=f"chmod 600 {path}, or set ORCHARD_ENV_KEY")
    key = path.read_text().strip()
    if not key:
        raise InfraError(f"the API key file {path} is empty", hint=f"delete {path} to make a new key")
    return key


def service_key() -> str:
    """The key the service checks: ORCHARD_ENV_KEY, else the key file (created on first use)."""
    from_env = os.environ.get(KEY_ENV)
    if from_env:
        return from_env
    path = key_path()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_file(path)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    return _read_file(path)


def client_key() -> str | None:
    """The key a client sends: ORCHARD_ENV_KEY, else the key file if there is one."""
    from_env = os.environ.get(KEY_ENV)
    if from_env:
        return from_env
    path = key_path()
    return _read_file(path) if path.exists() else None


def presented_key(headers: dict[str, str]) -> str | None:
    """The key in `X-API-Key` or `Authorization: Bearer ...` (header names in lower case)."""
    key = headers.get(HEADER.lower())
    if key:
        return key
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def check_key(presented: str | None, expected: str) -> None:
    """Raise AuthError unless `presented` equals `expected` (compared in constant time)."""
    if presented is None:
        raise AuthError("missing API key",
                        hint=f"send it as '{HEADER}: KEY' or 'Authorization: Bearer KEY'")
    if not hmac.compare_digest(presented.encode(), expected.encode()):
        raise AuthError("wrong API key",
                        hint=f"use the service's key ({KEY_ENV} or ORCHARD_HOME/env/api-key)")
