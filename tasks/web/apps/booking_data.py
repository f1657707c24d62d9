"""The booking site's seeded world: meeting rooms of different sizes, a few slots closed for
maintenance, and other people's bookings (plus some of the user's own: two unless the fixture
says) over the coming days.

`layout` is the one place that turns a BookingFixture (any part left out: drawn from the seed)
into rooms, open slots and bookings: the site builds its tables from it, and task synthesis
reads availability from it, so the two always agree."""

from __future__ import annotations

import random
from datetime import date, timedelta
from typing import Any

from orchard_cli.tasks.web.apps.fixture import BookingFixture, BookingLine, RoomFixture, SlotRef

ROOMS = [("aurora", "Aurora", 4), ("beacon", "Beacon", 6), ("cove", "Cove", 8), ("dune", "Dune", 10),
         ("estuary", "Estuary", 12), ("fathom", "Fathom", 16), ("galley", "Galley", 2), ("harbor", "Harbor Hall", 30)]
FEATURES = ["projector", "whiteboard", "video conferencing", "standing desks", "kitchenette", "natural light"]
GUESTS = [("Priya Shah", "priya.shah@birch.test"), ("Tom Lee", "tom.lee@acme.test"),
          ("Marta Kowalski", "marta@cobalt.test"), ("Yusuf Demir", "yusuf@fjord.test"),
          ("Lea Blanc", "lea.blanc@deltaprint.test"), ("Owen Price", "owen@elmcatering.test")]
ME = ("Alex Morgan", "alex@orchard.test")


def rooms(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(f"rooms-{seed}")
    chosen = sorted(rng.sample(ROOMS, 6), key=lambda r: r[2])
    return [{"id": rid, "name": name, "capacity": cap, "floor": f"Floor {rng.randint(1, 4)}",
             "features": sorted(rng.sample(FEATURES, rng.randint(1, 3)))} for rid, name, cap in chosen]


def layout(part: BookingFixture, seed: int, today: date) -> tuple[list[RoomFixture], list[SlotRef], list[BookingLine]]:
    """(rooms, open slots, bookings) of the fixture part on `today`."""
    rng = random.Random(f"booking-{seed}")
    room_list = part.rooms if part.rooms is not None else [RoomFixture.model_validate(r) for r in rooms(seed)]
    days = [(today + timedelta(days=d)).isoformat() for d in range(1, part.days + 1)]
    every = [SlotRef(room=r.id, date=d, time=h) for r in room_list for d in days for h in part.hours]
    if part.closed is not None:
        closed = {(c.room, c.date, c.time) for c in part.closed}
    else:
        closed = {(s.room, s.date, s.time) for s in every if rng.random() < 0.04}
    open_slots = [s for s in every if (s.room, s.date, s.time) not in closed]
    if part.bookings is not None:
        return room_list, open_slots, part.bookings
    by_room = {r.id: r for r in room_list}
    soon = [s for s in open_slots if s.date <= days[min(6, len(days) - 1)]]
    taken = rng.sample(soon, len(soon) // 4)
    mine = set(rng.sample(range(len(taken)), min(part.mine, len(taken))))
    numbers = rng.sample(range(1000, 9000), len(taken))
    bookings = []
    for i, s in enumerate(sorted(taken, key=lambda s: (s.date, s.time, s.room))):
        who = ME if i in mine else rng.choice(GUESTS)
        people = rng.randint(max(1, by_room[s.room].capacity // 2), by_room[s.room].capacity)
        bookings.append(BookingLine(ref=f"HW-{numbers[i]}", room=s.room, date=s.date,
                                    time=s.time, people=people, name=who[0], email=who[1], mine=i in mine))
    return room_list, open_slots, bookings
