"""What the web-mini sites hold when an attempt starts (`fixture:` in task.yaml).

    {"seed": 1001, "now": "2026-11-30T09:00:00+00:00",
     "shop": {...}, "wiki": {...}, "mail": {...}, "booking": {...}}

Every part, and every list inside a part, is optional: what is left out is the seeded default
(`seed` picks the catalogue, the wiki's pages, the mailbox, the rooms and their bookings), so
`{"seed": 7}` is a whole fixture. `now` is the sites' clock: the booking site's "today" is its
date, and what the agent creates (orders, revisions, bookings, mail) is stamped from it.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchard_cli.tasks.kit.mailfixture import MailFixture

SLUG = r"^[a-z0-9][a-z0-9-]{0,63}$"
NOW = "2026-11-30T09:00:00+00:00"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _unique(values: list[str], what: str) -> None:
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise ValueError(f"{what} {dup[0]!r} is used twice")


# --- shop ---------------------------------------------------------------------------------
class VariantFixture(_Model):
    """One buyable SKU of a product (a color and/or size)."""

    sku: str = Field(pattern=SLUG)
    color: str = ""
    size: str = ""
    price: float | None = Field(None, gt=0)
    """None: the product's price."""
    stock: int = Field(10, ge=0)


class ProductFixture(_Model):
    """One catalogue product; without variants it is one SKU (its id) of its color and size."""

    id: str = Field(pattern=SLUG)
    name: str = Field(min_length=1)
    category: str = Field(min_length=1)
    brand: str = Field(min_length=1)
    material: str = ""
    color: str = ""
    size: str = ""
    price: float = Field(gt=0)
    rating: float = Field(ge=0, le=5)
    reviews: int = Field(0, ge=0)
    description: str = ""
    variants: list[VariantFixture] = Field(default_factory=list)


class CartLine(_Model):
    sku: str
    qty: int = Field(ge=1, le=99)


class ShopFixture(_Model):
    title: str = "Harbor & Pine"
    products: list[ProductFixture] | None = None
    """None: the catalogue drawn from the seed."""
    cart: list[CartLine] = Field(default_factory=list)
    """What is in the cart at the start (SKUs of the catalogue)."""

    @model_validator(mode="after")
    def _ids(self) -> "ShopFixture":
        if self.products is not None:
            _unique([p.id for p in self.products], "product id")
            _unique([v.sku for p in self.products for v in p.variants] +
                    [p.id for p in self.products if not p.variants], "sku")
        _unique([line.sku for line in self.cart], "cart sku")
        return self


# --- wiki ---------------------------------------------------------------------------------
class RevisionFixture(_Model):
    author: str = Field(min_length=1)
    summary: str = ""
    at: str
    """ISO 8601 with an offset."""
    text: str

    @field_validator("at")
    @classmethod
    def _at(cls, value: str) -> str:
        return instant(value, "revision time")


class PageFixture(_Model):
    slug: str = Field(pattern=SLUG)
    title: str = Field(min_length=1)
    revisions: list[RevisionFixture] = Field(min_length=1)
    """Oldest first; the last is the page's current text."""


class EditFixture(RevisionFixture):
    """A revision added on top of the pages (a later edit: vandalism to revert, say)."""

    slug: str


class WikiFixture(_Model):
    title: str = "Lorewiki"
    user: str = "Alex"
    """Whom the agent edits as (the author of its revisions)."""
    pages: list[PageFixture] | None = None
    """None: the pages drawn from the seed."""
    edits: list[EditFixture] = Field(default_factory=list)
    """Revisions appended, in order, to the pages named by their slug."""

    @field_validator("pages")
    @classmethod
    def _slugs(cls, value: list[PageFixture] | None) -> list[PageFixture] | None:
        if value is not None:
            _unique([p.slug for p in value], "page slug")
            _unique([p.title.lower() for p in value], "page title")
        return value


# --- booking ------------------------------------------------------------------------------
class RoomFixture(_Model):
    id: str = Field(pattern=SLUG)
    name: str = Field(min_length=1)
    capacity: int = Field(ge=1, le=200)
    floor: str = ""
    features: list[str] = Field(default_factory=list)


class SlotRef(_Model):
    room: str
    date: str
    time: str


class BookingLine(SlotRef):
    """A booking already made (by someone else, or by the user earlier)."""

    ref: str = Field(pattern=r"^[A-Z0-9-]{3,20}$")
    people: int = Field(ge=1)
    name: str
    email: str
    notes: str = ""
    status: Literal["confirmed", "cancelled"] = "confirmed"
    mine: bool = False
    """The user's own booking (listed under My bookings, cancellable)."""


class BookingFixture(_Model):
    title: str = "Harbor Works Rooms"
    rooms: list[RoomFixture] | None = None
    """None: the rooms drawn from the seed."""
    days: int = Field(14, ge=1, le=60)
    """Slots exist from tomorrow for this many days."""
    hours: list[str] = Field(default_factory=lambda: [f"{h:02d}:00" for h in range(9, 17)])
    """Start times of the one-hour slots, each day."""
    closed: list[SlotRef] | None = None
    """Slots that do not exist (maintenance); None: a few drawn from the seed."""
    bookings: list[BookingLine] | None = None
    """None: bookings drawn from the seed."""
    mine: int = Field(2, ge=0, le=20)
    """How many of the drawn bookings are the user's (when `bookings` is None)."""

    @field_validator("hours")
    @classmethod
    def _hours(cls, value: list[str]) -> list[str]:
        for hour in value:
            datetime.strptime(hour, "%H:%M")
        _unique(value, "hour")
        return sorted(value)

    @model_validator(mode="after")
    def _refs(self) -> "BookingFixture":
        if self.rooms is not None:
            _unique([r.id for r in self.rooms], "room id")
        if self.bookings is not None:
            _unique([b.ref for b in self.bookings], "booking ref")
            for b in self.bookings:
                date.fromisoformat(b.date)
        return self


# --- the whole ----------------------------------------------------------------------------
class WebFixture(_Model):
    seed: int = 0
    now: str = NOW
    shop: ShopFixture | None = None
    wiki: WikiFixture | None = None
    mail: MailFixture | None = None
    """The claw family's mailbox model (address, name, mailboxes); None: one drawn from the seed."""
    booking: BookingFixture | None = None

    @field_validator("now")
    @classmethod
    def _now(cls, value: str) -> str:
        return instant(value, "now")

    def clock(self) -> datetime:
        return datetime.fromisoformat(self.now)


def instant(value: str, what: str) -> str:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not an ISO 8601 date-time") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{what} {value!r} needs a UTC offset (e.g. +00:00)")
    return value


def load(data: Any) -> WebFixture:
    """The fixture, or ValueError with one line: where it is wrong and why."""
    if isinstance(data, WebFixture):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"a web fixture is a mapping, not {type(data).__name__}")
    try:
        return WebFixture.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "fixture"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ValueError(f"bad web fixture at {where}: {first['msg']}{more}") from None
