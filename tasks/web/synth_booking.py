"""Booking task templates: book a slot, a booking whose first choice the site rejects (a room
too small, a slot taken), the earliest free hour, and cancelling one of the user's (four to six) bookings.
Availability is read from the same layout the site builds (apps/booking_data.py)."""

from __future__ import annotations

from datetime import date
from typing import Any

from orchard_cli.tasks.web.apps.booking_data import layout
from orchard_cli.tasks.web.apps.fixture import BookingFixture
from orchard_cli.tasks.web.synth_kit import (NOW, USER, Draw, Unfit, answer, answer_check, choose, click, fill, goto,
                                             request_check, role, state_check, template)

MINE = "SELECT room_id, date, time, people, name, email, status FROM bookings WHERE origin = 'site'"


class World:
    """The rooms, and which hours are free, as the site will have them."""

    def __init__(self, d: Draw, part: BookingFixture | None = None) -> None:
        rooms, slots, bookings = layout(part or BookingFixture(), d.seed, NOW.date())
        self.rooms = {r.id: r for r in rooms}
        self.hours = BookingFixture().hours
        taken = {(b.room, b.date, b.time) for b in bookings if b.status == "confirmed"}
        self.free = {(s.room, s.date, s.time) for s in slots} - taken
        self.bookings = bookings
        self.days = sorted({s.date for s in slots})

    def label(self, room: str) -> str:
        r = self.rooms[room]
        return f"{r.name} (up to {r.capacity} people)"

    def by_size(self) -> list[Any]:
        return sorted(self.rooms.values(), key=lambda r: r.capacity)


def words(day: str) -> str:
    when = date.fromisoformat(day)
    return f"{when:%A}, {when.day} {when:%B}"


def form_steps(w: World, room: str, day: str, time: str, people: int) -> list[dict[str, Any]]:
    return [goto("booking:/book"), choose("#room", w.label(room)), fill("#date", day), choose("#time", time),
            fill("#people", str(people)), fill("#name", USER[0]), fill("#email", USER[1]),
            click(role("button", "Confirm booking"))]


def _row(room: str, day: str, time: str, people: int) -> list[Any]:
    return [room, day, time, people, USER[0], USER[1], "confirmed"]


@template("booking-book", "booking")
def book(d: Draw) -> dict[str, Any]:
    w = World(d)
    options = [(r, day, w.hours[i], w.hours[i + 1]) for r in w.rooms for day in w.days[1:7]
               for i in range(len(w.hours) - 1)
               if (r, day, w.hours[i]) in w.free and (r, day, w.hours[i + 1]) in w.free]
    room, day, time, later = d.rng.choice(options)
    people = d.rng.randint(max(1, w.rooms[room].capacity // 2), w.rooms[room].capacity)
    return {"site": "booking", "category": "book", "difficulty": "easy",
            "prompt": f"Book the {w.rooms[room].name} room for {people} people on {words(day)} at {time}, "
                      f"in the name of {USER[0]} ({USER[1]}).", "start": "/", "fixture": d.fixture(),
            "checks": [state_check("booked", "booking", MINE, [_row(room, day, time, people)]),
                       request_check("submitted", "booking", "/book",
                                     {"room": room, "date": day, "time": time, "people": str(people)})],
            "gold": [*form_steps(w, room, day, time, people), answer("Booked.")],
            "near_miss": [*form_steps(w, room, day, later, people), answer("Booked.")]}


@template("booking-validate", "booking")
def validate(d: Draw) -> dict[str, Any]:
    w = World(d)
    if d.rng.random() < 0.5:
        cases = []
        for day in w.days[1:7]:
            for time in w.hours:
                fits = [r for r in w.by_size() if (r.id, day, time) in w.free]
                for i, first in enumerate(fits[:-2]):
                    people = first.capacity + 1
                    bigger = [r for r in fits[i + 1:] if r.capacity >= people]
                    if len(bigger) >= 2 and bigger[0].capacity < bigger[1].capacity:
                        cases.append((first.id, day, time, people, bigger[0].id, bigger[1].id))
        if not cases:
            raise Unfit("no room too small with two bigger ones free")
        first, day, time, people, right, wrong = d.rng.choice(cases)
        when = (day, time)
        rule = "book the smallest room that seats everyone at the same time instead"
        fix, near = (right, time), (wrong, time)
    else:
        booked = {(b.room, b.date, b.time) for b in w.bookings if b.status == "confirmed"}
        cases = []
        for r in w.rooms:
            for day in w.days[1:7]:
                for h in w.hours:
                    later = [x for x in w.hours if x > h and (r, day, x) in w.free]
                    if (r, day, h) in booked and len(later) >= 2:
                        cases.append((r, day, h, later[0], later[1]))
        if not cases:
            raise Unfit("no booked slot with two free hours after it")
        first, day, time, right_time, wrong_time = d.rng.choice(cases)
        people = max(1, w.rooms[first].capacity // 2)
        when = (day, time)
        rule = "book the next free hour in the same room on that day instead"
        fix, near = (first, right_time), (first, wrong_time)

    def steps(room: str, hour: str) -> list[dict[str, Any]]:
        retry = [choose("#room", w.label(room))] if room != first else []
        return [*form_steps(w, first, when[0], when[1], people), *retry, choose("#time", hour),
                click(role("button", "Confirm booking")), answer("Booked.")]

    return {"site": "booking", "category": "validate", "difficulty": "hard",
            "prompt": f"Book the {w.rooms[first].name} room for {people} people on {words(day)} at {time}, in the "
                      f"name of {USER[0]} ({USER[1]}). If the site will not take that booking, {rule}.",
            "start": "/", "fixture": d.fixture(),
            "checks": [state_check("booked", "booking", MINE, [_row(fix[0], day, fix[1], people)]),
                       request_check("submitted_once", "booking", "/book",
                                     {"room": fix[0], "date": day, "time": fix[1]}, count=1)],
            "gold": steps(*fix), "near_miss": steps(*near)}


@template("booking-availability", "booking")
def availability(d: Draw) -> dict[str, Any]:
    w = World(d)
    cases = []
    for r in w.rooms:
        for day in w.days[:7]:
            free = [h for h in w.hours if (r, day, h) in w.free]
            if (r, day, w.hours[0]) not in w.free and len(free) >= 2:
                cases.append((r, day, free[0], free[1]))
    if not cases:
        raise Unfit("no room whose first hour is taken")
    room, day, right, wrong = d.rng.choice(cases)
    steps = [goto("booking:/availability"), fill("#avail-date", day), click(role("button", "Show availability"))]
    return {"site": "booking", "category": "availability", "difficulty": "easy",
            "prompt": f"On {words(day)}, what is the earliest hour at which the {w.rooms[room].name} room is free? "
                      "Answer with the start time.", "start": "/", "fixture": d.fixture(),
            "checks": [answer_check(includes=[right], excludes=[h for h in w.hours if h != right])],
            "gold": [*steps, answer(right)], "near_miss": [*steps, answer(wrong)]}


@template("booking-cancel", "booking")
def cancel(d: Draw) -> dict[str, Any]:
    # Four to six bookings of the user's: with two, a policy that never reads the prompt and always
    # clicks the same row's button is right about half the time.
    part = BookingFixture(mine=d.rng.randint(4, 6))
    w = World(d, part)
    mine = sorted((b for b in w.bookings if b.mine and b.status == "confirmed"), key=lambda b: b.ref)
    if len(mine) < 4:
        raise Unfit("fewer than four bookings of the user's")
    target = d.rng.choice(mine)
    other = next(b for b in mine if b is not target)
    expect = [[b.ref, "cancelled" if b is target else "confirmed"] for b in mine]

    def steps(ref: str) -> list[dict[str, Any]]:
        return [goto("booking:/bookings"), click(role("button", f"Cancel booking {ref}")), answer("Cancelled.")]

    return {"site": "booking", "category": "cancel", "difficulty": "easy",
            "prompt": f"Cancel my booking of the {w.rooms[target.room].name} room on {words(target.date)} at "
                      f"{target.time}. Keep my other bookings.", "start": "/",
            "fixture": d.fixture(booking={"mine": part.mine}),
            "checks": [state_check("cancelled", "booking", "SELECT ref, status FROM bookings WHERE mine = 1 "
                                   "ORDER BY ref", expect),
                       request_check("cancelled_once", "booking", f"/bookings/{target.ref}/cancel", count=1)],
            "gold": steps(target.ref), "near_miss": steps(other.ref)}
