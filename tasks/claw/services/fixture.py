"""What a claw task's services hold when an attempt starts (`services:` in task.yaml).

Every part is optional: a task without `mail` still gets an empty mailbox (INBOX, Archive, Sent,
Trash) at `me@example.com`, one without `calendar` an empty calendar in UTC, and so on.
"""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

STANDARD_MAILBOXES = ("INBOX", "Archive", "Sent", "Trash")
"""Mailboxes that always exist (empty unless the fixture fills them)."""
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


def _instant(value: str, what: str) -> str:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not an ISO 8601 date-time") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{what} {value!r} needs a UTC offset (e.g. +01:00)")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class MessageFixture(_Model):
    """One e-mail in a mailbox."""

    id: str = Field(pattern=ID_PATTERN)
    """Stable id; the message's Message-ID is `<id@orchard.test>`."""
    sender: str = Field(alias="from")
    """The From header: `Name <address>` or a bare address."""
    to: list[str] = Field(default_factory=list)
    """To addresses (`Name <address>` or bare)."""
    cc: list[str] = Field(default_factory=list)
    """Cc addresses."""
    subject: str = ""
    """The subject line."""
    date: str
    """When it was sent: ISO 8601 with an offset."""
    body: str = ""
    """The plain-text body."""
    unread: bool = False
    """Whether the message is still unread (no \\Seen flag)."""
    in_reply_to: str | None = None
    """The id of the message this one answers, or None."""

    @field_validator("date")
    @classmethod
    def _date(cls, value: str) -> str:
        return _instant(value, "date")


class MailFixture(_Model):
    """The user's mailbox."""

    address: str = "me@example.com"
    """The user's own address (mail sent to it over SMTP is also delivered to INBOX)."""
    name: str = ""
    """The user's display name."""
    mailboxes: dict[str, list[MessageFixture]] = Field(default_factory=dict)
    """Folder name -> its messages. INBOX, Archive, Sent and Trash always exist."""

    @field_validator("mailboxes")
    @classmethod
    def _names(cls, value: dict[str, list[MessageFixture]]) -> dict[str, list[MessageFixture]]:
        for name in value:
            if not name or any(c in name for c in "./\\\r\n") or name.upper() == "INBOX" != name:
                raise ValueError(f"mailbox name {name!r} is not allowed (no '.' or '/'; INBOX in capitals)")
        ids = [m.id for messages in value.values() for m in messages]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"message id {dup[0]!r} is used twice")
        return value


class EventFixture(_Model):
    """One calendar event."""

    uid: str = Field(pattern=ID_PATTERN)
    """The event's UID (stable, checks refer to it)."""
    summary: str
    """The title."""
    start: str
    """ISO 8601 with an offset."""
    end: str
    """ISO 8601 with an offset; not before `start`."""
    location: str = ""
    """Where."""
    description: str = ""
    """Free text."""
    attendees: list[str] = Field(default_factory=list)
    """Attendee e-mail addresses."""

    @model_validator(mode="after")
    def _times(self) -> "EventFixture":
        start, end = _instant(self.start, "start"), _instant(self.end, "end")
        if datetime.fromisoformat(end) < datetime.fromisoformat(start):
            raise ValueError(f"event {self.uid!r} ends before it starts")
        return self


class TodoFixture(_Model):
    """One todo (a VTODO in the calendar)."""

    uid: str = Field(pattern=ID_PATTERN)
    """The todo's UID."""
    summary: str
    """What to do."""
    due: str | None = None
    """A date (2026-12-01) or an ISO 8601 date-time with an offset, or None."""
    done: bool = False
    """Whether it is completed."""

    @field_validator("due")
    @classmethod
    def _due(cls, value: str | None) -> str | None:
        if value is not None and len(value) == 10:
            date.fromisoformat(value)
            return value
        return value if value is None else _instant(value, "due")


class CalendarFixture(_Model):
    """The user's calendar (events and todos live in one CalDAV collection)."""

    timezone: str = "UTC"
    """IANA zone the snapshot and the tools show times in (e.g. Europe/Berlin)."""
    events: list[EventFixture] = Field(default_factory=list)
    """The events."""
    todos: list[TodoFixture] = Field(default_factory=list)
    """The todos."""

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @model_validator(mode="after")
    def _unique(self) -> "CalendarFixture":
        uids = [e.uid for e in self.events] + [t.uid for t in self.todos]
        dup = sorted({u for u in uids if uids.count(u) > 1})
        if dup:
            raise ValueError(f"calendar uid {dup[0]!r} is used twice")
        return self


class ContactFixture(_Model):
    """One address-book card."""

    uid: str = Field(pattern=ID_PATTERN)
    """The card's UID."""
    name: str
    """Full name."""
    email: str = ""
    """E-mail address."""
    phone: str = ""
    """Phone number."""
    org: str = ""
    """Organisation."""


class ServicesFixture(_Model):
    """The whole state an attempt starts from; `ClawServices.reset` makes the services hold it."""

    mail: MailFixture | None = None
    """The mailbox (None: an empty one at me@example.com)."""
    calendar: CalendarFixture | None = None
    """Events and todos (None: an empty calendar in UTC)."""
    contacts: list[ContactFixture] | None = None
    """The address book (None: empty)."""

    @field_validator("contacts")
    @classmethod
    def _unique(cls, value: list[ContactFixture] | None) -> list[ContactFixture] | None:
        uids = [c.uid for c in value or []]
        dup = sorted({u for u in uids if uids.count(u) > 1})
        if dup:
            raise ValueError(f"contact uid {dup[0]!r} is used twice")
        return value
