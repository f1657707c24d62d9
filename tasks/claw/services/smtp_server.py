"""The SMTP submission server of a claw service set: aiosmtpd, AUTH (PLAIN/LOGIN, no TLS on
loopback) required before MAIL, every message delivered into the attempt's Maildir.

    python -m orchard_cli.tasks.claw.services.smtp_server --port N --config STATE/smtp.json

A message gets a Message-ID and a Date when it has none, a copy in Sent (read) and, when the user's
own address is among the recipients, one in INBOX (unread); one JSON line per message goes to the
attempt's sent log (what the snapshot's `mail.sent` shows). Which Maildir, address and sent log
is read per message from `current.json` beside the config (the set's `reset` rewrites it).
Commands go to the protocol log, one line each, prefixed by the client's port (never a password).
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import json
import signal
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

from orchard_cli.tasks.kit.mailstore import DOMAIN, MailStore, parse


class Handler:
    def __init__(self, config: dict[str, Any], current: Path) -> None:
        self.user = config["user"].encode()
        self.password = config["password"].encode()
        self.current = current
        # open as long as the server runs; append mode, so that the set's reset can truncate it
        self.log_file = open(config["log"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def log(self, session: Any, line: str) -> None:
        peer = session.peer[1] if isinstance(session.peer, tuple) else session.peer
        self.log_file.write(f"{peer} {line}\n")

    def authenticate(self, server: SMTP, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data.login == self.user and data.password == self.password
        login = data.login.decode(errors="replace") if isinstance(data, LoginPassword) else "?"
        self.log(session, f"AUTH {mechanism} {login} {'ok' if ok else 'refused'}")
        return AuthResult(success=ok, handled=False)

    async def handle_EHLO(self, server, session, envelope, hostname, responses):  # noqa: N802 - aiosmtpd's hook names
        session.host_name = hostname
        self.log(session, f"EHLO {hostname}")
        return responses

    async def handle_HELO(self, server, session, envelope, hostname):  # noqa: N802
        session.host_name = hostname
        self.log(session, f"HELO {hostname}")
        return f"250 {server.hostname}"

    async def handle_MAIL(self, server, session, envelope, address, options):  # noqa: N802
        if not session.authenticated:
            self.log(session, f"MAIL FROM:<{address}> refused: not authenticated")
            return "530 5.7.0 Authentication required"
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        self.log(session, f"MAIL FROM:<{address}>")
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, options):  # noqa: N802
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        self.log(session, f"RCPT TO:<{address}>")
        return "250 OK"

    async def handle_RSET(self, server, session, envelope):  # noqa: N802
        self.log(session, "RSET")
        return "250 OK"

    async def handle_QUIT(self, server, session, envelope):  # noqa: N802
        self.log(session, "QUIT")
        return "221 Bye"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        try:
            current = json.loads(self.current.read_text())
        except (OSError, ValueError):
            self.log(session, "DATA refused: the mailbox is being reset")
            return "451 4.3.0 Mailbox being reset, try again"
        raw = _complete(envelope.original_content or b"")
        store = MailStore(Path(current["maildir"]))
        store.deliver(raw, "Sent", seen=True)
        address = current["address"].lower()
        if address in (r.lower() for r in envelope.rcpt_tos):
            store.deliver(raw, "INBOX", seen=False)
        fields = parse(raw)
        named = {email.utils.parseaddr(a)[1].lower() for a in fields["to"] + fields["cc"]}
        entry = {"id": fields["id"], "from": fields["from"] or envelope.mail_from, "to": fields["to"],
                 "cc": fields["cc"], "bcc": [r for r in envelope.rcpt_tos if r.lower() not in named],
                 "recipients": sorted({r.lower() for r in envelope.rcpt_tos}),
                 "subject": fields["subject"], "body": fields["body"], "in_reply_to": fields["in_reply_to"],
                 "date": fields["date"]}
        with open(current["sent_log"], "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")
        self.log(session, f"DATA {len(raw)} bytes, id {fields['id']}, subject {fields['subject']!r}")
        return f"250 OK queued as {fields['id']}"


def _complete(raw: bytes) -> bytes:
    """The message with a Message-ID and a Date added when it has none."""
    head = b"\n" + raw.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].lower()
    extra = b""
    if b"\nmessage-id:" not in head:
        extra += f"Message-ID: <s-{uuid.uuid4().hex[:12]}@{DOMAIN}>\r\n".encode()
    if b"\ndate:" not in head:
        now = datetime.now(timezone.utc).replace(microsecond=0)
        extra += f"Date: {email.utils.format_datetime(now)}\r\n".encode()
    return extra + raw


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    config = json.loads(args.config.read_text())
    handler = Handler(config, args.config.with_name("current.json"))

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    def factory() -> SMTP:
        return SMTP(handler, hostname=DOMAIN, ident="orchard claw SMTP", auth_require_tls=False,
                    authenticator=handler.authenticate, loop=loop,
                    data_size_limit=int(config.get("max_message_bytes") or 10 << 20))

    server = loop.run_until_complete(loop.create_server(factory, host=args.host, port=args.port))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, loop.stop)
    try:
        loop.run_forever()
    finally:
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
