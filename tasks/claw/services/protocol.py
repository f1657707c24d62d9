"""Protocol logs as evidence: what the clients of each server did, read from the servers' own logs
(pymap's `--debug` traffic, radicale's request log, the SMTP server's command log), one line per
command, never a password.
"""

from __future__ import annotations

import re

PROBE_AGENT = "orchard-probe"
"""The User-Agent of `ClawServices.failed`'s own HTTP probe (left out of the CalDAV log)."""
LINE_LIMIT = 300

_IMAP = re.compile(r"^DEBUG:pymap\.imap:(\w+) -->\| ?(.*)$")
_LOGIN = re.compile(r"^(\S+\s+LOGIN\s+(?:\"(?:[^\"\\]|\\.)*\"|\S+))\s+.*$", re.IGNORECASE)
_AUTHENTICATE = re.compile(r"^(\S+\s+AUTHENTICATE\s+\S+)(\s+\S+)?\s*$", re.IGNORECASE)
_LITERAL = re.compile(r"\{(\d+)\+?\}$")
_THREAD = re.compile(r"^\[[^\]]*\] \[(\d+/[^\]]*)\] \[(\w+)\] (.*)$")
_REQUEST = re.compile(r"^(\w+) request for '([^']*)'(?: with depth '([^']*)')? received from \S+(?: using '([^']*)')?")
_RESPONSE = re.compile(r"^\w+ response status for '[^']*'.*: (\d{3}.*)$")
_FAILED = re.compile(r"^Failed login attempt from \S+: ('[^']*'|\"[^\"]*\")")


def _cut(line: str) -> str:
    return line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT] + f"... ({len(line)} chars)"


def imap(text: str) -> str:
    """Client commands from pymap's debug log: `<conn> <command>` (a literal, an APPENDed message
    say, left out: its `{size}` stays), LOGIN/AUTHENTICATE secrets as ***."""
    out: list[str] = []
    authenticating: set[str] = set()
    literal: dict[str, int] = {}  # connection -> bytes of a literal still to skip
    for raw in text.splitlines():
        match = _IMAP.match(raw)
        if not match:
            continue
        conn, line = match.group(1)[:6], match.group(2)
        if literal.get(conn, 0) > 0:
            literal[conn] -= len(line.encode()) + 2
            continue
        if conn in literal:  # the CRLF that ends a command after its literal
            del literal[conn]
            if not line.strip():
                continue
        if conn in authenticating:
            if " " not in line.strip():  # a SASL response (base64, one word)
                out.append(f"{conn} ***")
                continue
            authenticating.discard(conn)
        size = _LITERAL.search(line)
        if size:
            literal[conn] = int(size.group(1))
        login = _LOGIN.match(line)
        auth = _AUTHENTICATE.match(line)
        if login:
            line = login.group(1) + " ***"
        elif auth:
            line = auth.group(1) + (" ***" if auth.group(2) else "")
            authenticating.add(conn)
        out.append(f"{conn} {_cut(line)}")
    return "\n".join(out)


def caldav(text: str) -> str:
    """Requests from radicale's log: `METHOD path [depth d] -> status` (the probe's left out)."""
    out: list[str] = []
    pending: dict[str, int] = {}
    probes: set[str] = set()
    for raw in text.splitlines():
        match = _THREAD.match(raw)
        if not match:
            continue
        thread, _level, message = match.groups()
        request = _REQUEST.match(message)
        if request:
            method, path, depth, agent = request.groups()
            if agent == PROBE_AGENT:
                probes.add(thread)
                continue
            probes.discard(thread)
            pending[thread] = len(out)
            out.append(f"{method} {path}" + (f" depth {depth}" if depth else ""))
            continue
        response = _RESPONSE.match(message)
        if response:
            if thread in probes:
                probes.discard(thread)
            elif thread in pending:
                index = pending.pop(thread)
                out[index] += f" -> {response.group(1)}"
            continue
        failed = _FAILED.match(message)
        if failed:
            out.append(f"login refused for {failed.group(1)}")
    return "\n".join(_cut(line) for line in out)
