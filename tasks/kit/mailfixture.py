"""A mailbox as a task's fixture gives it (`services.mail` in claw's task.yaml, the webmail site's
fixture in web's): messages by folder, the user's address and name. The mail store
(`mailstore.py`) builds a Maildir from it."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

STANDARD_MAILBOXES = ("INBOX", "Archive", "Sent", "Trash")
"""Mailboxes that always exist (empty unless the fixture fills them)."""
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


def instant(value: str, what: str) -> str:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not an ISO 8601 date-time") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{what} {value!r} needs a UTC offset (e.g. +01:00)")
    return value


class FixtureModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class MessageFixture(FixtureModel):
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
        return instant(value, "date")


class MailFixture(FixtureModel):
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


