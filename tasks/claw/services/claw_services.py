"""`ClawServices`: one set of real servers for personal-assistant episodes, on 127.0.0.1.

    smtp    aiosmtpd (our handler, `smtp_server.py`): submission with AUTH, delivers into the Maildir
    imap    pymap, maildir backend: serves the same Maildir
    caldav  radicale: CalDAV and CardDAV over its filesystem collections

Each is a subprocess (a crash is reported by `failed()`, never takes the caller down; it ends when
the caller's process does, see `guard`), started once
(`start`, cold) and reset per attempt (`reset`, warm): the mailbox is rebuilt in a new folder and
pymap's passwd file pointed at it (a session left from the previous attempt is cut off, a new
login sees the new mail), the collections are rewritten under radicale's lock. All state is under
`root`; `stop` ends every process.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import secrets
import shutil
import smtplib
import socket
import subprocess
import threading
import time
import uuid
from datetime import datetime, timezone
from email.utils import parseaddr
from pathlib import Path
from typing import Any

import orchard_cli
from orchard_cli.errors import InfraError, MissingDependencyError
from orchard_cli.tasks.claw.services import protocol
from orchard_cli.tasks.claw.services.actions import CalendarActions, ContactActions, MailActions, Refused
from orchard_cli.tasks.claw.services.calstore import CalStore
from orchard_cli.tasks.claw.services.catalogue import ACTIONS
from orchard_cli.tasks.claw.services.fixture import CalendarFixture, ServicesFixture
from orchard_cli.tasks.kit import guard
from orchard_cli.tasks.kit.mailfixture import MailFixture
from orchard_cli.tasks.kit.mailstore import MailStore, display_address, render
from orchard_cli.tools.spec import ToolReply

SERVICES = ("smtp", "imap", "caldav")
PROGRAMS = {"smtp": "aiosmtpd", "imap": "pymap", "caldav": "radicale"}
START_TIMEOUT = 30.0
PROBE_TIMEOUT = 2.0
USER = "me"
REQUIRED = {"aiosmtpd": "aiosmtpd==1.4.6", "pymap": "pymap==0.36.7", "radicale": "radicale==3.9.0",
            "vobject": "vobject"}
"""Module -> the pin the services were built and measured with."""
_PACKAGE_ROOT = str(Path(orchard_cli.__file__).resolve().parents[1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write(path: Path, text: str) -> None:
    """Atomically (a reader sees the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


MESSAGE_LIMIT = 10 << 20
"""Bytes a message may hold at a service set's SMTP server."""


class ClawServices:
    """A ToolBackend (`call`) plus the lifecycle and the evidence of one service set."""

    def __init__(self, root: Path, message_limit: int = MESSAGE_LIMIT) -> None:
        self.root = Path(root)
        self.message_limit = message_limit
        """Bytes a message may hold at the SMTP server (a larger one is its 552: a 413 reply)."""
        self._password = secrets.token_urlsafe(12)
        self._procs: dict[str, subprocess.Popen] = {}
        self._guard: guard.Guard | None = None
        self._ports: dict[str, int] = {}
        self._lock = threading.RLock()
        self._attempt = 0
        self._mail: MailStore | None = None
        self._cal: CalStore | None = None
        self._address = ""
        self._name = ""
        self._sent_log = self.root / "state" / "sent.jsonl"
        self._actions = {"mail": MailActions(self._mailstore, self._send),
                         "calendar": CalendarActions(self._calstore),
                         "contacts": ContactActions(self._calstore)}

    # --- paths ------------------------------------------------------------------------------
    @property
    def _state(self) -> Path:
        return self.root / "state"

    @property
    def _imap_dir(self) -> Path:
        return self.root / "imap"

    @property
    def _dav_dir(self) -> Path:
        return self.root / "dav"

    def _log(self, service: str) -> Path:
        return self.root / "logs" / f"{service}.log"

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the three servers (in parallel) and wait until each accepts connections."""
        missing = [pin for module, pin in REQUIRED.items() if importlib.util.find_spec(module) is None]
        if missing:
            raise MissingDependencyError(f"the claw services need {', '.join(missing)}, not installed",
                                         hint=f"pip install {' '.join(missing)}")
        from pysasl.hashing import BuiltinHash  # pymap's own password hashing

        with self._lock:
            if self._procs:
                return
            for folder in (self._state, self._imap_dir, self._dav_dir, self.root / "logs", self.root / "tmp"):
                folder.mkdir(parents=True, exist_ok=True)
            (self._imap_dir / "pymap-etc-shadow").write_text(
                f"{USER}:{BuiltinHash(rounds=1000).hash(self._password)}:::::::\r\n")
            (self._state / "htpasswd").write_text(f"{USER}:{self._password}\n")
            (self._state / "smtp.json").write_text(json.dumps(
                {"user": USER, "password": self._password, "log": str(self._log("smtp")),
                 "max_message_bytes": self.message_limit}))
            try:
                for service in SERVICES:
                    self._spawn(service)
                importlib.import_module("vobject")  # while the servers boot, so that no reset pays for it

                self.reset(ServicesFixture())  # no client can log in before start returns
                for service in SERVICES:
                    self._wait(service)
            except BaseException:
                self.stop()
                raise

    def _command(self, service: str, port: int) -> list[str]:
        if service == "smtp":
            return guard.command("orchard_cli.tasks.claw.services.smtp_server", "--port", str(port),
                                 "--config", str(self._state / "smtp.json"))
        if service == "imap":
            return guard.command("pymap.main:main", "--debug", "--no-tls", "--host", "127.0.0.1", "--port", str(port),
                                 "maildir", str(self._imap_dir))
        return guard.command("radicale", "--config", "", "--server-hosts", f"127.0.0.1:{port}",
                             "--auth-type", "htpasswd", "--auth-htpasswd-filename", str(self._state / "htpasswd"),
                             "--auth-htpasswd-encryption", "plain", "--auth-delay", "0",
                             "--storage-filesystem-folder", str(self._dav_dir), "--logging-level", "info")

    def _stderr(self, service: str) -> Path:
        """Where a server's stderr goes: pymap's and radicale's is their traffic log."""
        return self.root / "logs" / "smtp.stderr" if service == "smtp" else self._log(service)

    def _spawn(self, service: str) -> None:
        port = _free_port()
        # TMPDIR: pymap writes its files through a temporary file renamed into place, which fails
        # across file systems (the system's /tmp and the root may differ).
        # FQDN: pymap's greeting otherwise asks the resolver for this host's name on every connection.
        if self._guard is None:
            self._guard = guard.Guard()
        env = {**os.environ, "TMPDIR": str(self.root / "tmp"), "PYTHONUNBUFFERED": "1", "FQDN": "localhost",
               **self._guard.env()}
        if service == "smtp":  # our own module: found even when orchard runs from a checkout, not installed
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
        with open(self._stderr(service), "ab") as stderr:
            proc = subprocess.Popen(self._command(service, port), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=stderr, cwd=self.root, env=env, pass_fds=(self._guard.fd,))
        self._procs[service], self._ports[service] = proc, port

    def _wait(self, service: str, tries: int = 3) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            proc, port = self._procs[service], self._ports[service]
            if proc.poll() is not None:
                if tries > 1:  # most likely the port was taken between choosing and binding it
                    tries -= 1
                    self._spawn(service)
                    continue
                raise InfraError(f"{service} server ({PROGRAMS[service]}) did not start: {self._last_words(service)}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise InfraError(f"{service} server ({PROGRAMS[service]}) did not listen on port {port} "
                                     f"within {START_TIMEOUT:.0f} s") from None
                time.sleep(0.01)

    def _last_words(self, service: str) -> str:
        try:
            lines = [line for line in self._stderr(service).read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            lines = []
        return lines[-1][:300] if lines else "no output"

    def stop(self) -> None:
        """Stop every server (terminate, then kill after 5 s); safe to call twice."""
        with self._lock:
            procs, self._procs = dict(self._procs), {}
            held, self._guard = self._guard, None
        guard.end(*procs.values())
        if held is not None:
            held.close()

    def failed(self) -> str | None:
        """None when every server is alive and answers; else one line naming the first that is not."""
        with self._lock:
            if not self._procs:
                return "the services are not started"
            for service in SERVICES:
                proc = self._procs[service]
                if proc.poll() is not None:
                    how = (f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else
                           f"exited with code {proc.returncode}: {self._last_words(service)}")
                    return f"{service} server ({PROGRAMS[service]}) {how}"
                problem = self._probe(service, self._ports[service])
                if problem:
                    port = self._ports[service]
                    return f"{service} server ({PROGRAMS[service]}) does not answer on port {port}: {problem}"
        return None

    @staticmethod
    def _probe(service: str, port: int) -> str | None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT) as sock:
                if service == "caldav":
                    sock.sendall(f"OPTIONS / HTTP/1.0\r\nUser-Agent: {protocol.PROBE_AGENT}\r\n\r\n".encode())
                greeting = sock.recv(64)
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"
        expected = {"smtp": b"220", "imap": b"* OK", "caldav": b"HTTP/"}[service]
        return None if greeting.startswith(expected) else f"unexpected greeting {greeting[:40]!r}"

    # --- per attempt --------------------------------------------------------------------------
    def reset(self, fixture: ServicesFixture) -> None:
        """Make the state exactly `fixture` (the previous attempt's mail, events, contacts gone) and
        start the protocol logs afresh."""
        with self._lock:
            mail = fixture.mail or MailFixture()
            calendar = fixture.calendar or CalendarFixture()
            self._attempt += 1
            home = self._imap_dir / f"a{self._attempt}"
            if home.exists():
                shutil.rmtree(home)
            self._mail = MailStore.build(home, mail)
            self._address, self._name = mail.address, mail.name
            self._sent_log = self._state / f"sent-{self._attempt}.jsonl"
            self._sent_log.write_text("")
            _write(self._imap_dir / "pymap-etc-passwd", f"{USER}:::::{home.name}:\r\n")
            _write(self._state / "current.json", json.dumps(
                {"maildir": str(home), "address": mail.address, "name": mail.name,
                 "sent_log": str(self._sent_log)}))
            for stale in self._imap_dir.glob("a*"):  # the previous attempts' mail (a session left there is cut off)
                if stale != home and stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
            for stale in self._state.glob("sent-*.jsonl"):
                if stale != self._sent_log:
                    stale.unlink(missing_ok=True)
            self._cal = CalStore(self._dav_dir, USER, calendar.timezone)
            self._cal.build(calendar, fixture.contacts)
            for service in SERVICES:  # the servers append (O_APPEND): they write on at the new end
                with self._log(service).open("ab") as log:
                    log.truncate(0)

    def ports(self) -> dict[str, int]:
        return dict(self._ports)

    def credentials(self) -> dict[str, str]:
        """The login for IMAP, SMTP and CalDAV/CardDAV (this set's own; fine to show the agent)."""
        return {"user": USER, "password": self._password}

    def snapshot(self) -> dict[str, Any]:
        """The whole state, as checks query it."""
        with self._lock:
            mail, cal = self._mailstore(), self._calstore()
            sent = [json.loads(line) for line in self._sent_log.read_text().splitlines() if line.strip()]
            return {"mail": {"address": self._address, "mailboxes": mail.snapshot(), "sent": sent},
                    "calendar": {"events": cal.events(), "todos": cal.todos()},
                    "contacts": cal.contacts()}

    def protocol_log(self) -> dict[str, str]:
        """Per service, what its clients did since the last reset (commands; never a password)."""
        text = {}
        for service in SERVICES:
            try:
                text[service] = self._log(service).read_bytes().decode("utf-8", "replace")
            except FileNotFoundError:
                text[service] = ""
        logs = {"smtp": text["smtp"].rstrip("\n"), "imap": protocol.imap(text["imap"]),
                "caldav": protocol.caldav(text["caldav"])}
        return {name: log.replace(self._password, "***") for name, log in logs.items()}  # whatever got past

    # --- the ToolBackend ------------------------------------------------------------------------
    def call(self, service: str, action: str, arguments: dict[str, Any]) -> ToolReply:
        """Perform one action; the agent's mistakes are 400/404 replies. Raises only when a server
        is gone (the caller's ToolSession turns that into a 503 and an infra failure)."""
        if action not in ACTIONS.get(service, {}):
            return ToolReply(ok=False, status=404, error=f"no action {service}.{action}")
        method = getattr(self._actions[service], action)
        try:
            inspect.signature(method).bind(**arguments)
        except TypeError as exc:
            return ToolReply(ok=False, status=400, error=f"bad arguments: {exc}")
        with self._lock:
            try:
                return ToolReply(ok=True, status=200, result=method(**arguments))
            except Refused as exc:
                return ToolReply(ok=False, status=exc.status, error=str(exc))

    def _mailstore(self) -> MailStore:
        if self._mail is None:
            raise RuntimeError("the services are not started (call start() first)")
        return self._mail

    def _calstore(self) -> CalStore:
        if self._cal is None:
            raise RuntimeError("the services are not started (call start() first)")
        return self._cal

    def _send(self, to: list[str], cc: list[str], subject: str, body: str, in_reply_to: str | None) -> str:
        """Send through the set's own SMTP server (real submission, as an agent's client would)."""
        mid = f"s-{uuid.uuid4().hex[:12]}"
        sender = display_address(self._name, self._address)
        raw = render(mid, sender, to, cc, subject, body, datetime.now(timezone.utc).replace(microsecond=0), in_reply_to)
        try:
            with smtplib.SMTP("127.0.0.1", self._ports["smtp"], local_hostname="orchard-tool", timeout=10) as smtp:
                smtp.login(USER, self._password)
                # CRLF on the wire: smtplib sends bytes as they are, and a server reads lines to CRLF
                smtp.sendmail(self._address, [parseaddr(a)[1] for a in to + cc], raw.replace(b"\n", b"\r\n"))
        except (smtplib.SMTPResponseException, smtplib.SMTPRecipientsRefused) as exc:
            raise Refused(*smtp_refusal(exc)) from None  # the server answered: the agent reads it
        return mid


def smtp_refusal(exc: Exception) -> tuple[int, str]:
    """(status, message) of the mail server's refusal of a message, as the agent reads it: 413 for
    a message over the server's size limit (SMTP 552), 503 for a refusal it says is passing (4xx),
    400 otherwise. Only a lost connection (SMTPServerDisconnected, an OSError) is the service
    failing; a server that answers is not."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        first = next(iter(exc.recipients.items()), ("?", (550, b"refused")))
        code, text, what = first[1][0], first[1][1], f"recipient {first[0]}"
    else:
        code, text, what = exc.smtp_code, exc.smtp_error, "message"
    said = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    status = 413 if code == 552 else 503 if 400 <= code < 500 else 400
    return status, f"the mail server refused the {what}: {code} {' '.join(said.split())}"
