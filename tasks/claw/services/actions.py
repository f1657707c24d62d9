"""What each action of `ACTIONS` does, on the stores of the current attempt.

An action raises `Refused(status, message)` for the agent's mistakes (404 unknown id or mailbox,
400 a value that does not parse or make sense); `ClawServices.call` turns it into a ToolReply.
Arguments arrive schema-checked; only their meaning is checked here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from email.utils import getaddresses, parseaddr
from typing import Any

from orchard_cli.tasks.claw.services.calstore import CalStore, instant, parse_when
from orchard_cli.tasks.kit.mailstore import MailStore, display_address


LIMIT = 200
"""The most messages one list_messages call returns."""


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _summary(msg: dict[str, Any]) -> dict[str, Any]:
    return {"id": msg["id"], "from": msg["from"], "subject": msg["subject"], "date": msg["date"],
            "unread": msg["unread"]}


def _newest_first(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(msg: dict[str, Any]) -> tuple[float, str]:
        try:
            return -datetime.fromisoformat(msg["date"]).timestamp(), msg["id"]
        except ValueError:
            return 0.0, msg["id"]

    return sorted(found, key=key)


def _emails(values: list[str], what: str) -> list[str]:
    out = []
    for value in values:
        for name, address in getaddresses([value]):
            if "@" not in address or " " in address:
                raise Refused(400, f"{what}: {value!r} is not an e-mail address")
            out.append(display_address(name, address))
    return out


class MailActions:
    def __init__(self, store: Callable[[], MailStore], send: Callable[..., str]) -> None:
        self.store = store
        self.send = send

    def _mailbox(self, name: str) -> str:
        names = self.store().mailboxes()
        for candidate in names:
            if candidate == name or candidate.lower() == name.lower():
                return candidate
        raise Refused(404, f"no mailbox named {name!r} (there are: {', '.join(names)})")

    def _find(self, mid: str) -> tuple[Any, dict[str, Any]]:
        found = self.store().find(mid)
        if found is None:
            raise Refused(404, f"no message with id {mid!r}")
        return found

    def list_messages(self, mailbox: str = "INBOX", unread_only: bool = False, limit: int = 20) -> Any:
        if limit < 1:
            raise Refused(400, f"limit: {limit} is not at least 1")
        limit = min(limit, LIMIT)
        found = [m for _, m in self.store().messages(self._mailbox(mailbox)) if m["unread"] or not unread_only]
        return [_summary(m) for m in _newest_first(found)[:limit]]

    def search_messages(self, query: str, mailbox: str | None = None) -> Any:
        store = self.store()
        names = [self._mailbox(mailbox)] if mailbox else store.mailboxes()
        needle = query.lower()
        found = []
        for name in names:
            for _, m in store.messages(name):
                text = " ".join([m["from"], *m["to"], *m["cc"], m["subject"], m["body"]]).lower()
                if needle in text:
                    found.append({**m, "mailbox": name})
        return [{**_summary(m), "mailbox": m["mailbox"]} for m in _newest_first(found)]

    def read_message(self, id: str) -> Any:  # noqa: A002 - the action's argument name
        item, msg = self._find(id)
        if item.unread:
            self.store().set_unread(item, False)
        return {**msg, "unread": False, "mailbox": item.mailbox}

    def send_message(self, to: str | list[str], subject: str, body: str, cc: list[str] | None = None,
                     in_reply_to: str | None = None) -> Any:
        recipients = _emails([to] if isinstance(to, str) else to, "to")
        copies = _emails(cc or [], "cc")
        if not recipients:
            raise Refused(400, "to: at least one recipient is needed")
        if in_reply_to:
            self._find(in_reply_to)
        return {"id": self.send(recipients, copies, subject, body, in_reply_to)}

    def move_message(self, id: str, mailbox: str) -> Any:  # noqa: A002
        item, _ = self._find(id)
        moved = self.store().move(item, self._mailbox(mailbox))
        return {"id": id, "mailbox": moved.mailbox}

    def delete_message(self, id: str) -> Any:  # noqa: A002
        item, _ = self._find(id)
        store = self.store()
        if not store.exists("Trash"):
            store.create("Trash")
        return {"id": id, "mailbox": store.move(item, "Trash").mailbox}

    def mark_message(self, id: str, unread: bool) -> Any:  # noqa: A002
        item, _ = self._find(id)
        self.store().set_unread(item, unread)
        return {"id": id, "unread": unread}


class CalendarActions:
    def __init__(self, store: Callable[[], CalStore]) -> None:
        self.store = store

    def _when(self, value: str, what: str) -> datetime | date:
        try:
            return parse_when(value, self.store().zone)
        except (ValueError, TypeError):
            raise Refused(400, f"{what}: {value!r} is not an ISO 8601 date or date-time") from None

    def _ordered(self, start: Any, end: Any) -> None:
        zone = self.store().zone
        if instant(end, zone) < instant(start, zone):
            raise Refused(400, "end is before start")

    def list_events(self, start: str | None = None, end: str | None = None) -> Any:
        store = self.store()
        lo = instant(self._when(start, "start"), store.zone) if start else None
        hi = instant(self._when(end, "end"), store.zone) if end else None
        out = []
        for event in store.events():
            s = instant(parse_when(event["start"], store.zone), store.zone) if event["start"] else None
            e = instant(parse_when(event["end"], store.zone), store.zone) if event["end"] else s
            if s is None:
                continue
            if (hi is None or s < hi) and (lo is None or e > lo or (s == e and s >= lo)):
                out.append(event)
        return out

    def create_event(self, summary: str, start: str, end: str, location: str = "", description: str = "",
                     attendees: list[str] | None = None) -> Any:
        s, e = self._when(start, "start"), self._when(end, "end")
        self._ordered(s, e)
        fields = {"summary": summary, "start": s, "end": e, "location": location, "description": description,
                  "attendees": _emails(attendees or [], "attendees")}
        return {"uid": self.store().create_event(fields)}

    def update_event(self, uid: str, summary: str | None = None, start: str | None = None, end: str | None = None,
                     location: str | None = None, description: str | None = None,
                     attendees: list[str] | None = None) -> Any:
        given = {"summary": summary, "start": start, "end": end, "location": location, "description": description,
                 "attendees": attendees}
        fields: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        store = self.store()
        current = store.event(uid)
        if current is None:
            raise Refused(404, f"no event with uid {uid!r}")
        for key in ("start", "end"):
            if key in fields:
                fields[key] = self._when(fields[key], key)
        s = fields.get("start") or parse_when(current["start"], store.zone)
        e = fields.get("end") or parse_when(current["end"], store.zone)
        self._ordered(s, e)
        if "attendees" in fields:
            fields["attendees"] = _emails(fields["attendees"], "attendees")
        store.update_event(uid, fields)
        return store.event(uid)

    def delete_event(self, uid: str) -> Any:
        if not self.store().delete("VEVENT", uid):
            raise Refused(404, f"no event with uid {uid!r}")
        return {"uid": uid, "deleted": True}

    def list_todos(self, include_done: bool = False) -> Any:
        return [t for t in self.store().todos() if include_done or not t["done"]]

    def create_todo(self, summary: str, due: str | None = None) -> Any:
        return {"uid": self.store().create_todo(summary, self._when(due, "due") if due else None)}

    def complete_todo(self, uid: str) -> Any:
        todo = self.store().complete_todo(uid)
        if todo is None:
            raise Refused(404, f"no todo with uid {uid!r}")
        return todo


class ContactActions:
    def __init__(self, store: Callable[[], CalStore]) -> None:
        self.store = store

    def search_contacts(self, query: str) -> Any:
        needle = query.lower()
        return [c for c in self.store().contacts()
                if needle in " ".join([c["name"], c["email"], c["phone"], c["org"]]).lower()]

    def create_contact(self, name: str, email: str, phone: str = "", org: str = "") -> Any:
        if len(_emails([email], "email")) != 1:
            raise Refused(400, f"email: {email!r} is not one e-mail address")
        if not name.strip():
            raise Refused(400, "name: must not be empty")
        return {"uid": self.store().create_contact(name.strip(), parseaddr(email)[1], phone, org)}
