"""The mailbox: one Maildir tree in pymap's '++' layout (INBOX at the root, `Archive` in `.Archive`),
the one store that pymap serves over IMAP, the SMTP server delivers into and the tools read and write.

Folders are listed afresh on every call (pymap too rereads them on each command), so a change
made by any of the three is seen by the others at once; only a file's parse is kept, keyed by its
Maildir key, size and mtime (a message file never changes, only its name and its folder do).

A message's id is its Message-ID without `@orchard.test` (`<m1@orchard.test>` -> `m1`), the whole
Message-ID for a stranger's message, the file's Maildir key for one without any.

Imported by the SMTP server's process too: standard library only.
"""

from __future__ import annotations

import email
import email.utils
import hashlib
import itertools
import os
import re
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from email.header import Header, decode_header, make_header
from email.message import Message
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchard_cli.tasks.kit.mailfixture import MailFixture

DOMAIN = "orchard.test"
STANDARD = ("INBOX", "Archive", "Sent", "Trash")
LINE_LIMIT = 78
"""Bytes a body line is sent in as it is (as Python's email package decides); a body with a longer
line is sent quoted-printable (RFC 5322's hard limit is 998: an SMTP server refuses more)."""
HEADER_LIMIT = 900
"""Characters of a header value written as it is; a longer one is folded as encoded words."""
_counter = itertools.count()
_TAGS = re.compile(r"<[^>]+>")
_SPECIALS = re.compile(r'[][\\()<>@,:;".]')


def message_id(mid: str) -> str:
    """The Message-ID header of a message id (`m1` -> `<m1@orchard.test>`)."""
    return f"<{mid}@{DOMAIN}>"


def id_of(header: str | None) -> str | None:
    """The message id of a Message-ID (or In-Reply-To) header value, or None."""
    if not header:
        return None
    value = str(header).strip().split()[0].strip("<>") if str(header).strip() else ""
    if not value:
        return None
    return value[: -len(DOMAIN) - 1] if value.endswith("@" + DOMAIN) else value


def _header_text(value: str) -> str:
    """A header value as sent: itself when ASCII and short, else RFC 2047 encoded words (folded
    into lines that fit, however long the value)."""
    return value if value.isascii() and len(value) <= HEADER_LIMIT else Header(value, "utf-8").encode()


def _address(value: str) -> str:
    name, address = email.utils.parseaddr(value)
    return email.utils.formataddr((name, address), charset="utf-8") if name else address


def render(mid: str, sender: str, to: list[str], cc: list[str], subject: str, body: str,
           date: datetime, in_reply_to: str | None = None) -> bytes:
    """A plain-text message as bytes (what the fixture and the `send_message` tool write): built by
    hand, since the email package's header objects cost milliseconds per message."""
    head = [("Message-ID", message_id(mid)), ("Date", email.utils.format_datetime(date)),
            ("From", _address(sender))]
    if to:
        head.append(("To", ",\n ".join(_address(a) for a in to)))  # folded: one address a line
    if cc:
        head.append(("Cc", ",\n ".join(_address(a) for a in cc)))
    head.append(("Subject", _header_text(subject.replace("\r", " ").replace("\n", " "))))
    if in_reply_to:
        head += [("In-Reply-To", message_id(in_reply_to)), ("References", message_id(in_reply_to))]
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    if not text.endswith("\n"):
        text += "\n"
    encoding, text = _body_encoding(text)
    head += [("MIME-Version", "1.0"), ("Content-Type", "text/plain; charset=utf-8"),
             ("Content-Transfer-Encoding", encoding)]
    return ("".join(f"{k}: {v}\n" for k, v in head) + "\n" + text).encode("utf-8")


def _body_encoding(text: str) -> tuple[str, str]:
    """(Content-Transfer-Encoding, body as sent), as Python's email package chooses them: as it is
    while every line fits LINE_LIMIT bytes, else quoted-printable in lines of 76. Any text is
    sent (an SMTP server refuses a line that is too long), and reads back the same."""
    if max(len(line.encode("utf-8")) for line in text.split("\n")) <= LINE_LIMIT:
        return ("7bit" if text.isascii() else "8bit"), text
    from email import quoprimime

    return "quoted-printable", quoprimime.body_encode(text.encode("utf-8").decode("latin-1"), 76, "\n")


def _decoded(value: str | None) -> str:
    if not value:
        return ""
    try:
        return str(make_header(decode_header(value))).replace("\r\n", "").replace("\n", "")
    except (LookupError, ValueError, UnicodeError):
        return value


def display_address(name: str, address: str) -> str:
    """`Name <address>` (the name quoted when it holds specials), or the bare address; unlike
    formataddr, never RFC 2047-encoded."""
    if not name:
        return address
    if _SPECIALS.search(name):
        name = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{name} <{address}>"


def _addresses(msg: Message, name: str) -> list[str]:
    found = []
    for display, address in email.utils.getaddresses(msg.get_all(name, [])):
        if address or display:
            found.append(display_address(_decoded(display), address))
    return found


def _body(msg: Message) -> str:
    chosen = None
    for part in msg.walk():
        if part.is_multipart() or str(part.get("Content-Disposition", "")).lower().startswith("attachment"):
            continue
        if part.get_content_type() == "text/plain":
            chosen = part
            break
        if part.get_content_type() == "text/html" and chosen is None:
            chosen = part
    if chosen is None:
        return ""
    payload = chosen.get_payload(decode=True) or b""
    try:
        text = payload.decode(chosen.get_content_charset() or "utf-8", "replace")
    except LookupError:
        text = payload.decode("utf-8", "replace")
    if chosen.get_content_type() == "text/html":
        text = _TAGS.sub("", text)
    return text.replace("\r\n", "\n").rstrip("\n")


def parse(raw: bytes, fallback_id: str = "", fallback_date: float | None = None) -> dict[str, Any]:
    """A message's fields: id, from, to, cc, subject, date (ISO 8601), body, in_reply_to.
    (The email package's compat32 parser: a tenth of the cost of its `default` policy.)"""
    msg = email.message_from_bytes(raw)
    when = None
    if msg.get("Date"):
        try:
            when = email.utils.parsedate_to_datetime(str(msg["Date"]))
        except (TypeError, ValueError, IndexError):
            when = None
    if when is None:
        when = datetime.fromtimestamp(int(fallback_date or time.time()), timezone.utc)
    elif when.tzinfo is None:  # "-0000": the sender did not say; read as UTC
        when = when.replace(tzinfo=timezone.utc)
    senders = _addresses(msg, "From")
    return {
        "id": id_of(msg.get("Message-ID")) or fallback_id,
        "from": senders[0] if senders else _decoded(msg.get("From")),
        "to": _addresses(msg, "To"),
        "cc": _addresses(msg, "Cc"),
        "subject": _decoded(msg.get("Subject")),
        "date": when.isoformat(),
        "body": _body(msg),
        "in_reply_to": id_of(msg.get("In-Reply-To")),
    }


@dataclass(frozen=True)
class Item:
    """One message file: its mailbox, Maildir key, path and flags (`S` seen, `T` trashed, ...)."""

    mailbox: str
    key: str
    path: Path
    flags: str

    @property
    def unread(self) -> bool:
        return "S" not in self.flags


class MailStore:
    """The Maildir tree rooted at `home` (what pymap's passwd file names as the user's home)."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self._parsed: dict[tuple[str, int, int], dict[str, Any]] = {}
        """(key, size, mtime) -> parse()'s fields: a message file's content never changes, only
        its name (the flags) and its folder."""

    # --- layout -----------------------------------------------------------------------------
    def folder(self, mailbox: str) -> Path:
        return self.home if mailbox == "INBOX" else self.home / ("." + mailbox.replace("/", "."))

    def mailboxes(self) -> list[str]:
        """INBOX, then every other mailbox (pymap's names: `a/b` for `.a.b`) in name order."""
        found = []
        with os.scandir(self.home) as entries:
            for entry in entries:
                if entry.name.startswith(".") and entry.name not in (".", "..") and entry.is_dir() \
                        and (Path(entry.path) / "cur").is_dir():
                    found.append(entry.name[1:].replace(".", "/"))
        return ["INBOX"] + sorted(found)

    def exists(self, mailbox: str) -> bool:
        return (self.folder(mailbox) / "cur").is_dir()

    def create(self, mailbox: str) -> None:
        path = self.folder(mailbox)
        for sub in ("cur", "new", "tmp"):
            (path / sub).mkdir(parents=True, exist_ok=True)
        if mailbox != "INBOX":
            (path / "maildirfolder").touch()

    @classmethod
    def build(cls, home: Path, fixture: MailFixture) -> MailStore:
        """A fresh tree holding exactly the fixture (`home` must not exist yet)."""
        store = cls(home)
        names = list(STANDARD) + [n for n in fixture.mailboxes if n not in STANDARD]
        for name in names:
            store.create(name)
        (store.home / "subscriptions").write_text("".join(f"{n}\r\n" for n in names if n != "INBOX"))
        parents = {m.id: m.in_reply_to for messages in fixture.mailboxes.values() for m in messages}
        for name, messages in fixture.mailboxes.items():
            delivered = []
            for m in sorted(messages, key=lambda m: (datetime.fromisoformat(m.date).timestamp(), m.id)):
                when = datetime.fromisoformat(m.date)
                raw = render(m.id, m.sender, m.to, m.cc, m.subject, m.body, when, m.in_reply_to)
                delivered.append((m.id, store.deliver(raw, name, seen=not m.unread, when=when.timestamp())))
            store._uidlist(name, delivered, parents)
        return store

    def _uidlist(self, mailbox: str, delivered: list[tuple[str, Item]], parents: dict[str, str | None]) -> None:
        """pymap's UIDs for the fixture's messages, in date order (Dovecot's `dovecot-uidlist`, v3);
        without it pymap numbers them in directory order. Thread ids follow `in_reply_to`."""
        def root(mid: str) -> str:
            seen = set()
            while parents.get(mid) in parents and mid not in seen:
                seen.add(mid)
                mid = parents[mid]  # type: ignore[assignment]
            return mid

        lines = [f"3 V{secrets.randbelow(2**31 - 1) + 1} N{len(delivered) + 1} G{secrets.token_hex(16)}\r\n"]
        for uid, (mid, item) in enumerate(delivered, start=1):
            email_id = hashlib.md5(f"{mailbox}/{mid}".encode(), usedforsecurity=False).hexdigest()
            thread_id = hashlib.md5(root(mid).encode(), usedforsecurity=False).hexdigest()
            lines.append(f"{uid} EM{email_id} TT{thread_id} :{item.path.name}\r\n")
        (self.folder(mailbox) / "dovecot-uidlist").write_text("".join(lines))

    # --- reading ----------------------------------------------------------------------------
    def items(self, mailbox: str) -> list[Item]:
        """The mailbox's messages (new/ and cur/), in file-name order; [] for a missing mailbox."""
        folder = self.folder(mailbox)
        found = []
        for sub in ("new", "cur"):
            try:
                names = sorted(os.listdir(folder / sub))
            except FileNotFoundError:
                continue
            for name in names:
                if name.startswith("."):
                    continue
                key, _, info = name.partition(":")
                flags = info[2:] if info.startswith("2,") else ""
                found.append(Item(mailbox, key, folder / sub / name, flags))
        return found

    def read(self, item: Item) -> dict[str, Any] | None:
        """The message as the snapshot shows it, or None when the file went away meanwhile."""
        try:
            st = item.path.stat()
            cache = (item.key, st.st_size, st.st_mtime_ns)
            fields = self._parsed.get(cache)
            if fields is None:
                fields = self._parsed[cache] = parse(item.path.read_bytes(), item.key, st.st_mtime)
        except FileNotFoundError:
            return None
        return {"id": fields["id"], "from": fields["from"], "to": list(fields["to"]), "cc": list(fields["cc"]),
                "subject": fields["subject"], "date": fields["date"], "body": fields["body"],
                "unread": item.unread, "in_reply_to": fields["in_reply_to"]}

    def messages(self, mailbox: str) -> list[tuple[Item, dict[str, Any]]]:
        """(item, message) for each message of the mailbox (listed again when a file was renamed
        under us, as pymap does to store a flag)."""
        for _ in range(3):
            found = [(item, self.read(item)) for item in self.items(mailbox)]
            if all(msg is not None for _, msg in found):
                break
        return [(item, msg) for item, msg in found if msg is not None]

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every mailbox's messages, each list by (date, id)."""
        return {name: sorted((m for _, m in self.messages(name)), key=_order)
                for name in self.mailboxes()}

    def find(self, mid: str) -> tuple[Item, dict[str, Any]] | None:
        """The message with this id: looked for in INBOX, the other mailboxes, Trash, then Sent
        (a message sent to oneself has a copy in INBOX and in Sent; the INBOX one is found)."""
        names = self.mailboxes()
        rest = [n for n in names if n not in ("INBOX", "Trash", "Sent")]
        for name in ["INBOX", *rest, "Trash", "Sent"]:
            if name not in names:
                continue
            for item, msg in self.messages(name):
                if msg["id"] == mid:
                    return item, msg
        return None

    # --- writing ----------------------------------------------------------------------------
    def deliver(self, raw: bytes, mailbox: str, seen: bool, when: float | None = None) -> Item:
        """Write one message (tmp/, then renamed into cur/, as Maildir delivery does)."""
        folder = self.folder(mailbox)
        if not self.exists(mailbox):
            self.create(mailbox)
        key = f"{time.time_ns()}.M{next(_counter)}P{os.getpid()}.orchard"
        flags = "S" if seen else ""
        tmp = folder / "tmp" / key
        tmp.write_bytes(raw)
        if when is not None:
            os.utime(tmp, (when, when))
        target = folder / "cur" / f"{key}:2,{flags}"
        os.rename(tmp, target)
        return Item(mailbox, key, target, flags)

    def set_flags(self, item: Item, flags: str) -> Item:
        flags = "".join(sorted(set(flags)))
        target = item.path.parent.parent / "cur" / f"{item.key}:2,{flags}"
        if target != item.path:
            os.rename(item.path, target)
        return Item(item.mailbox, item.key, target, flags)

    def set_unread(self, item: Item, unread: bool) -> Item:
        flags = item.flags.replace("S", "") if unread else item.flags + "S"
        return self.set_flags(item, flags)

    def move(self, item: Item, mailbox: str) -> Item:
        if mailbox == item.mailbox:
            return item
        target = self.folder(mailbox) / "cur" / item.path.name
        if item.path.parent.name == "new":
            target = target.with_name(f"{item.key}:2,{item.flags}")
        os.rename(item.path, target)
        return Item(mailbox, item.key, target, item.flags)


def _order(msg: dict[str, Any]) -> tuple[float, str]:
    try:
        stamp = datetime.fromisoformat(msg["date"]).timestamp()
    except ValueError:
        stamp = 0.0
    return stamp, msg["id"]
