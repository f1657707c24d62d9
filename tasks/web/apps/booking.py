"""The booking site: meeting rooms by the hour. Availability by date, a booking form that checks
every field (a date after "today", within the booking horizon; an open, free slot; a party
that fits the room; a name; an e-mail address) and shows each error beside its field; the
user's bookings; cancel.

    GET  /                       rooms, the availability form
    GET  /availability?date=&people=   free / booked / closed per room and hour
    GET  /book?room=&date=&time= POST /book: room, date, time, people, name, email, notes
                                 -> 303 /bookings/{ref} (422 with the errors)
    GET  /bookings               my bookings; POST /bookings/{ref}/cancel -> 303 /bookings

State: tables resources (id, name, capacity, floor, features), slots (room_id, date, time: the
open ones) and bookings (ref, room_id, date, time, people, name, email, notes, status
[confirmed | cancelled], mine, origin [fixture | site], created_at).
"""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from orchard_cli.tasks.web.apps import booking_data
from orchard_cli.tasks.web.apps.db import Database, Images, image
from orchard_cli.tasks.web.apps.fixture import BookingFixture, WebFixture
from orchard_cli.tasks.web.apps.kit import (Clock, Request, Response, Router, button, esc, form, not_found, page,
                                            redirect, select, table, text_input, textarea, url)

SCHEMA = """
CREATE TABLE resources(id TEXT PRIMARY KEY, position INTEGER, name TEXT, capacity INTEGER, floor TEXT, features TEXT);
CREATE TABLE slots(id INTEGER PRIMARY KEY, room_id TEXT REFERENCES resources(id), date TEXT, time TEXT,
  UNIQUE(room_id, date, time));
CREATE TABLE bookings(ref TEXT PRIMARY KEY, room_id TEXT REFERENCES resources(id), date TEXT, time TEXT,
  people INTEGER, name TEXT, email TEXT, notes TEXT, status TEXT, mine INTEGER, origin TEXT, created_at TEXT);
"""
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")
REF_BASE = 9000
ROUTES = Router()


class Booking:
    name = "booking"

    def __init__(self, folder: Path) -> None:
        self.db = Database(Path(folder) / "booking.sqlite")
        self._images = Images()
        self.part = BookingFixture()
        self.title = self.part.title
        self.clock = Clock(WebFixture().clock())

    def reset(self, fixture: WebFixture) -> None:
        part = fixture.booking or BookingFixture()
        key = json.dumps([fixture.seed, fixture.now, part.model_dump(mode="json")], sort_keys=True)
        self.db.load(self._images.get(key, lambda: image(SCHEMA, lambda c: _fill(c, part, fixture))))
        self.part, self.title, self.clock = part, part.title, Clock(fixture.clock())

    @property
    def today(self) -> date:
        return self.clock.start.date()

    def handle(self, request: Request) -> Response:
        return ROUTES.dispatch(self, request)

    def nav(self) -> list[tuple[str, str]]:
        return [("/", "Rooms"), ("/availability", "Availability"), ("/book", "Book a room"),
                ("/bookings", "My bookings")]

    def query(self, sql: str) -> list[list[Any]]:
        return self.db.query(sql)

    def snapshot(self) -> dict[str, Any]:
        rows = self.db.all("SELECT ref, room_id, date, time, people, status FROM bookings "
                           "WHERE mine = 1 OR origin = 'site' ORDER BY date, time, ref")
        return {"bookings": [dict(r) for r in rows]}

    def page(self, title: str, body: str, status: int = 200, **flash: str) -> Response:
        return Response(status, page(self.title, title, body, self.nav(), **flash))

    def rooms(self) -> list[sqlite3.Row]:
        return self.db.all("SELECT * FROM resources ORDER BY position")


def _fill(conn: sqlite3.Connection, part: BookingFixture, fixture: WebFixture) -> None:
    rooms, slots, bookings = booking_data.layout(part, fixture.seed, fixture.clock().date())
    for i, r in enumerate(rooms):
        conn.execute("INSERT INTO resources VALUES (?,?,?,?,?,?)", (r.id, i, r.name, r.capacity, r.floor,
                                                                   ", ".join(r.features)))
    conn.executemany("INSERT INTO slots(room_id, date, time) VALUES (?,?,?)", [(s.room, s.date, s.time) for s in slots])
    known = {r.id for r in rooms}
    for b in bookings:
        if b.room not in known:
            raise ValueError(f"bad web fixture at booking.bookings: no room {b.room!r}")
        conn.execute("INSERT INTO bookings VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     (b.ref, b.room, b.date, b.time, b.people, b.name, b.email, b.notes, b.status, int(b.mine),
                      "fixture", fixture.now))


@ROUTES.get("/")
def home(site: Booking, req: Request) -> Response:
    rows = [[esc(r["name"]), str(r["capacity"]), esc(r["floor"]), esc(r["features"])] for r in site.rooms()]
    tomorrow = (site.today + timedelta(days=1)).isoformat()
    body = (f"<p>Today is {site.today:%A, %d %B %Y}. Rooms can be booked by the hour from tomorrow, up to "
            f"{site.part.days} days ahead.</p>"
            + table(["Room", "Seats", "Floor", "Features"], rows, caption="Rooms")
            + _availability_form(tomorrow, ""))
    return site.page("Meeting rooms", body)


def _availability_form(day: str, people: str) -> str:
    inner = (text_input("date", "Date", day, kind="date", ident="avail-date")
             + text_input("people", "Number of people", people, kind="number", min="1", ident="avail-people")
             + button("Show availability"))
    return form("/availability", inner, method="get", label="Check availability")


def _state(site: Booking, room: str, day: str, time: str) -> str:
    """open | booked | closed."""
    if site.db.one("SELECT 1 FROM slots WHERE room_id = ? AND date = ? AND time = ?", room, day, time) is None:
        return "closed"
    taken = site.db.one("SELECT 1 FROM bookings WHERE room_id = ? AND date = ? AND time = ? AND status = 'confirmed'",
                        room, day, time)
    return "booked" if taken else "open"


@ROUTES.get("/availability")
def availability(site: Booking, req: Request) -> Response:
    day, people = req.arg("date") or (site.today + timedelta(days=1)).isoformat(), req.arg("people")
    body = _availability_form(day, people)
    problem = _date_error(site, day)
    if problem:
        return site.page("Availability", body + f"<p class='error' role='alert'>{esc(problem)}</p>", status=422)
    need = int(people) if people.isdigit() else 0
    rooms = [r for r in site.rooms() if r["capacity"] >= need]
    rows = []
    for r in rooms:
        cells = [f"{esc(r['name'])} ({r['capacity']} seats)"]
        for hour in site.part.hours:
            state = _state(site, r["id"], day, hour)
            cells.append(f"<a href='{esc(url('/book', room=r['id'], date=day, time=hour, people=people))}' "
                         f"aria-label='Book {esc(r['name'])} at {hour}'>Free</a>" if state == "open"
                         else state.capitalize())
        rows.append(cells)
    when = date.fromisoformat(day)
    caption = f"{when:%A, %d %B %Y}" + (f", rooms for {need} or more" if need else "")
    return site.page("Availability", body + table(["Room", *site.part.hours], rows, caption=caption))


def _date_error(site: Booking, day: str) -> str:
    try:
        when = date.fromisoformat(day.strip())
    except ValueError:
        return "Enter a date as YYYY-MM-DD."
    if when <= site.today:
        return f"Choose a date after today ({site.today.isoformat()})."
    if when > site.today + timedelta(days=site.part.days):
        return f"Rooms can be booked up to {site.part.days} days ahead."
    return ""


@ROUTES.get("/book")
def book_form(site: Booking, req: Request, errors: dict[str, str] | None = None) -> Response:
    values = req.form if req.method == "POST" else req.query
    value = {k: values.get(k, [""])[0] for k in ("room", "date", "time", "people", "name", "email", "notes")}
    errors = errors or {}
    rooms = [("", "Choose a room")] + [(r["id"], f"{r['name']} (up to {r['capacity']} people)") for r in site.rooms()]
    times = [("", "Choose a time")] + [(h, h) for h in site.part.hours]
    fields = (select("room", "Room", rooms, value["room"], error=errors.get("room", ""))
              + text_input("date", "Date", value["date"], kind="date", error=errors.get("date", ""))
              + select("time", "Start time (one hour)", times, value["time"], error=errors.get("time", ""))
              + text_input("people", "Number of people", value["people"], kind="number", min="1",
                           error=errors.get("people", ""))
              + text_input("name", "Your name", value["name"], error=errors.get("name", ""), autocomplete="name")
              + text_input("email", "Email", value["email"], kind="email", error=errors.get("email", ""),
                           autocomplete="email")
              + textarea("notes", "Notes (optional)", value["notes"], rows=3) + button("Confirm booking"))
    alert = f"The booking was not made: {len(errors)} field(s) need attention." if errors else ""
    return site.page("Book a room", form("/book", fields, label="Booking"), status=422 if errors else 200, alert=alert)


def _errors(site: Booking, req: Request) -> dict[str, str]:
    errors = {}
    room = site.db.one("SELECT * FROM resources WHERE id = ?", req.field("room"))
    day, time = req.field("date").strip(), req.field("time")
    if room is None:
        errors["room"] = "Choose a room."
    errors["date"] = _date_error(site, day)
    if time not in site.part.hours:
        errors["time"] = "Choose a start time."
    elif room is not None and not errors["date"]:
        state = _state(site, room["id"], day, time)
        if state != "open":
            errors["time"] = (f"{room['name']} is already booked on {day} at {time}." if state == "booked"
                              else f"{room['name']} is closed on {day} at {time}.")
    people = req.field("people").strip()
    if not people.isdigit() or int(people) < 1:
        errors["people"] = "Enter the number of people (at least 1)."
    elif room is not None and int(people) > room["capacity"]:
        errors["people"] = f"{room['name']} seats at most {room['capacity']} people."
    if not req.field("name").strip():
        errors["name"] = "Enter your name."
    if not EMAIL.match(req.field("email").strip()):
        errors["email"] = "Enter a valid email address."
    return {k: v for k, v in errors.items() if v}


@ROUTES.post("/book")
def book(site: Booking, req: Request) -> Response:
    errors = _errors(site, req)
    if errors:
        return book_form(site, req, errors)
    made = site.db.one("SELECT count(*) FROM bookings WHERE origin = 'site'")[0]
    ref = f"HW-{REF_BASE + made + 1}"
    site.db.run("INSERT INTO bookings VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                ref, req.field("room"), req.field("date").strip(), req.field("time"), int(req.field("people")),
                req.field("name").strip(), req.field("email").strip(), req.field("notes").strip(), "confirmed", 1,
                "site", site.clock.iso())
    return redirect(f"/bookings/{ref}?new=1")


def _describe(b: sqlite3.Row) -> list[str]:
    return [esc(b["ref"]), esc(b["room"]), esc(b["date"]), esc(b["time"]), str(b["people"]), esc(b["status"])]


@ROUTES.get("/bookings")
def bookings(site: Booking, req: Request) -> Response:
    mine = site.db.all("SELECT b.*, r.name AS room FROM bookings b JOIN resources r ON r.id = b.room_id "
                       "WHERE b.mine = 1 ORDER BY b.date, b.time, b.ref")
    rows = []
    for b in mine:
        cancel = form(f"/bookings/{b['ref']}/cancel", button("Cancel", label=f"Cancel booking {b['ref']}"),
                      label=f"Cancel {b['ref']}") if b["status"] == "confirmed" else ""
        rows.append([f"<a href='/bookings/{b['ref']}'>{esc(b['ref'])}</a>", *_describe(b)[1:], cancel])
    notice = f"Booking {req.arg('cancelled')} was cancelled." if req.arg("cancelled") else ""
    body = table(["Reference", "Room", "Date", "Time", "People", "Status", ""], rows, caption="My bookings") \
        if rows else "<p>You have no bookings.</p>"
    return site.page("My bookings", body, notice=notice)


@ROUTES.get("/bookings/{ref}")
def booking(site: Booking, req: Request, ref: str) -> Response:
    b = site.db.one("SELECT b.*, r.name AS room FROM bookings b JOIN resources r ON r.id = b.room_id "
                    "WHERE b.ref = ? AND b.mine = 1", ref)
    if b is None:
        return not_found(site, "No such booking.")
    facts = [("Reference", b["ref"]), ("Room", b["room"]), ("Date", b["date"]), ("Time", b["time"]),
             ("People", str(b["people"])), ("Name", b["name"]), ("Email", b["email"]), ("Status", b["status"])]
    rows = "".join(f"<tr><th scope='row'>{k}</th><td>{esc(v)}</td></tr>" for k, v in facts)
    notice = f"Booking confirmed. Your reference is {b['ref']}." if req.arg("new") else ""
    return site.page(f"Booking {b['ref']}", f"<table aria-label='Booking'>{rows}</table>"
                     "<p><a href='/bookings'>All my bookings</a></p>", notice=notice)


@ROUTES.post("/bookings/{ref}/cancel")
def cancel(site: Booking, req: Request, ref: str) -> Response:
    b = site.db.one("SELECT * FROM bookings WHERE ref = ? AND mine = 1", ref)
    if b is None:
        return not_found(site, "No such booking.")
    site.db.run("UPDATE bookings SET status = 'cancelled' WHERE ref = ?", ref)
    return redirect(url("/bookings", cancelled=ref))
