"""What a claw task's services hold when an attempt starts (`services:` in task.yaml).

Every part is optional: a task without `mail` still gets an empty mailbox (INBOX, Archive, Sent,
Trash) at `me@example.com`, one without `calendar` an empty calendar in UTC, and so on.
"""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

# the mail part of the fixture is the kit's (web's webmail site reads it too)
from orchard_cli.tasks.kit.mailfixture import ID_PATTERN, FixtureModel, MailFixture, instant


class EventFixture(FixtureModel):
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
        start, end = instant(self.start, "start"), instant(self.end, "end")
        if datetime.fromisoformat(end) < datetime.fromisoformat(start):
            raise ValueError(f"event {self.uid!r} ends before it starts")
        return self


class TodoFixture(FixtureModel):
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
        return value if value is None else instant(value, "due")


class CalendarFixture(FixtureModel):
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


class ContactFixture(FixtureModel):
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


class ServicesFixture(FixtureModel):
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
