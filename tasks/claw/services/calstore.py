"""The calendar (events and todos) and the address book: radicale's filesystem collections,
`collection-root/<user>/calendar/*.ics` and `collection-root/<user>/contacts/*.vcf`.

Radicale keeps nothing in memory between requests (its item cache on disk is keyed by a hash of
each file's content), so a file written here is what the next CalDAV request sees, and an item a
client PUTs is what the next read here sees. Writes hold radicale's own storage lock (an exclusive
flock on `.Radicale.lock`), reads its shared one. Times are stored in UTC and shown in the
calendar's zone with their offset; a client's item with a TZID or a floating time is read in that
zone (floating: the calendar's).
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from orchard_cli.tasks.claw.services.fixture import CalendarFixture, ContactFixture

PRODID = "-//orchard//claw services//EN"
CALENDAR_PROPS = {"tag": "VCALENDAR", "D:displayname": "Calendar",
                  "C:supported-calendar-component-set": "VEVENT,VTODO"}
CONTACTS_PROPS = {"tag": "VADDRESSBOOK", "D:displayname": "Contacts"}
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,100}$")


def parse_when(value: str, zone: ZoneInfo) -> datetime | date:
    """An ISO 8601 date or date-time; a date-time without offset is in `zone`. ValueError if bad."""
    if len(value) == 10:
        return date.fromisoformat(value)
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)


def show(value: Any, zone: ZoneInfo, tzid: str | None = None) -> str | None:
    """A DTSTART/DUE value as the snapshot shows it: a date, or a date-time in `zone` with offset."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        return value.isoformat()
    if value.tzinfo is None:
        try:
            value = value.replace(tzinfo=ZoneInfo(tzid) if tzid else zone)
        except (KeyError, ValueError):
            value = value.replace(tzinfo=zone)
    return value.astimezone(zone).isoformat()


def instant(value: datetime | date, zone: ZoneInfo) -> datetime:
    """A point in time for comparisons (a date is its midnight in `zone`)."""
    if not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day, tzinfo=zone)
    return value if value.tzinfo else value.replace(tzinfo=zone)


def _vutc() -> Any:
    from dateutil.tz import UTC  # vobject (0.9.9) writes `...Z` only for dateutil's UTC

    return UTC


def _utc(value: datetime | date) -> datetime | date:
    return value.astimezone(_vutc()) if isinstance(value, datetime) else value


def _param(prop: Any, name: str) -> str | None:
    values = prop.params.get(name) if prop is not None else None
    return values[0] if values else None


def new_uid() -> str:
    return uuid.uuid4().hex[:16]


class CalStore:
    """The two collections of one user under radicale's `--storage-filesystem-folder`."""

    def __init__(self, folder: Path, user: str, zone: str = "UTC") -> None:
        self.folder = Path(folder)
        self.user = user
        self.zone = ZoneInfo(zone)
        self.calendar = self.folder / "collection-root" / user / "calendar"
        self.contacts_dir = self.folder / "collection-root" / user / "contacts"
        self._cache: dict[tuple[str, int, int, int], list[tuple[str, dict[str, Any]]]] = {}

    @contextmanager
    def lock(self, write: bool) -> Iterator[None]:
        """Radicale's storage lock (the same file and flock radicale takes around each request)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / ".Radicale.lock", "a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # --- reset ------------------------------------------------------------------------------
    def build(self, calendar: CalendarFixture | None, contacts: list[ContactFixture] | None) -> None:
        """Make both collections hold exactly the fixture (everything else removed)."""
        with self.lock(write=True):
            for path, props in ((self.calendar, CALENDAR_PROPS), (self.contacts_dir, CONTACTS_PROPS)):
                if path.exists():
                    shutil.rmtree(path)
                path.mkdir(parents=True)
                (path / ".Radicale.props").write_text(json.dumps(props))
            for extra in self.calendar.parent.iterdir():
                if not extra.name.startswith(".") and extra not in (self.calendar, self.contacts_dir):
                    # a collection a client made in the previous attempt
                    shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
            for e in calendar.events if calendar else []:
                self._write(self.calendar, e.uid, ".ics", self._event_ics(
                    e.uid, e.summary, parse_when(e.start, self.zone), parse_when(e.end, self.zone),
                    e.location, e.description, e.attendees))
            for t in calendar.todos if calendar else []:
                due = parse_when(t.due, self.zone) if t.due else None
                self._write(self.calendar, t.uid, ".ics", self._todo_ics(t.uid, t.summary, due, t.done))
            for c in contacts or []:
                self._write(self.contacts_dir, c.uid, ".vcf", self._vcard(c.uid, c.name, c.email, c.phone, c.org))

    # --- reading ----------------------------------------------------------------------------
    def _records(self, folder: Path) -> list[tuple[Path, list[tuple[str, dict[str, Any]]]]]:
        """Each item file and what it holds: (VEVENT|VTODO|VCARD, fields) for each master component.
        Parsed once per version of a file (path, inode, mtime, size): vobject costs ms per item."""
        import vobject

        out = []
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            if path.name.startswith("."):
                continue
            try:
                st = path.stat()
                key = (path.name, st.st_ino, st.st_mtime_ns, st.st_size)
                records = self._cache.get(key)
                if records is None:
                    records = self._describe(vobject.readOne(path.read_text(encoding="utf-8", errors="replace")))
                    self._cache[key] = records
            except FileNotFoundError:
                continue
            except Exception:  # noqa: BLE001 - a client wrote something vobject cannot read: not ours to judge
                continue
            out.append((path, records))
        return out

    def _describe(self, obj: Any) -> list[tuple[str, dict[str, Any]]]:
        if obj.name == "VCARD":
            return [("VCARD", self._card(obj))]
        found = []
        for kind, read in (("VEVENT", self._event), ("VTODO", self._todo)):
            for comp in getattr(obj, kind.lower() + "_list", []):
                if "recurrence-id" not in comp.contents and "uid" in comp.contents:
                    found.append((kind, read(comp)))
                    break
        return found

    def _all(self, kind: str) -> list[dict[str, Any]]:
        folder = self.contacts_dir if kind == "VCARD" else self.calendar
        with self.lock(write=False):
            return [copy.deepcopy(fields) for _, records in self._records(folder) for k, fields in records if k == kind]

    def _event(self, comp: Any) -> dict[str, Any]:
        c = comp.contents
        start = c["dtstart"][0] if "dtstart" in c else None
        end_prop = c["dtend"][0] if "dtend" in c else None
        end_value = end_prop.value if end_prop is not None else None
        if end_value is None and start is not None:
            duration = c["duration"][0].value if "duration" in c else None
            default = timedelta(days=1) if not isinstance(start.value, datetime) else timedelta(0)
            end_value = start.value + (duration or default)
        attendees = [str(a.value)[7:] if str(a.value).lower().startswith("mailto:") else str(a.value)
                     for a in c.get("attendee", [])]
        return {"uid": str(c["uid"][0].value),
                "summary": str(c["summary"][0].value) if "summary" in c else "",
                "start": show(start.value if start else None, self.zone, _param(start, "TZID")),
                "end": show(end_value, self.zone, _param(end_prop or start, "TZID")),
                "location": str(c["location"][0].value) if "location" in c else "",
                "description": str(c["description"][0].value) if "description" in c else "",
                "attendees": attendees}

    def _todo(self, comp: Any) -> dict[str, Any]:
        c = comp.contents
        due = c["due"][0] if "due" in c else None
        status = str(c["status"][0].value).upper() if "status" in c else ""
        return {"uid": str(c["uid"][0].value),
                "summary": str(c["summary"][0].value) if "summary" in c else "",
                "due": show(due.value if due else None, self.zone, _param(due, "TZID")),
                "done": status == "COMPLETED" or "completed" in c}

    def events(self) -> list[dict[str, Any]]:
        """Every event, by (start, uid)."""
        return sorted(self._all("VEVENT"), key=lambda e: (self._sort_key(e["start"]), e["uid"]))

    def todos(self) -> list[dict[str, Any]]:
        """Every todo, by uid."""
        return sorted(self._all("VTODO"), key=lambda t: t["uid"])

    def contacts(self) -> list[dict[str, Any]]:
        """Every card, by uid."""
        return sorted(self._all("VCARD"), key=lambda x: x["uid"])

    @staticmethod
    def _card(card: Any) -> dict[str, Any]:
        c = card.contents
        org = c["org"][0].value if "org" in c else ""
        return {"uid": str(c["uid"][0].value) if "uid" in c else "",
                "name": str(c["fn"][0].value) if "fn" in c else "",
                "email": str(c["email"][0].value) if "email" in c else "",
                "phone": str(c["tel"][0].value) if "tel" in c else "",
                "org": ";".join(org) if isinstance(org, list) else str(org)}

    def _sort_key(self, shown: str | None) -> float:
        try:
            return instant(parse_when(shown, self.zone), self.zone).timestamp() if shown else 0.0
        except ValueError:
            return 0.0

    # --- writing ----------------------------------------------------------------------------
    def _write(self, folder: Path, uid: str, suffix: str, text: str) -> Path:
        name = uid if _SAFE.match(uid) else hashlib.sha1(uid.encode()).hexdigest()
        path = folder / (name + suffix)
        tmp = folder / f".orchard-tmp-{name}"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        return path

    @staticmethod
    def _event_ics(uid: str, summary: str, start: Any, end: Any, location: str, description: str,
                   attendees: list[str]) -> str:
        lines = ["BEGIN:VEVENT", f"UID:{_text(uid)}", f"DTSTAMP:{_stamp()}", "DTSTART" + _when(start),
                 "DTEND" + _when(end), f"SUMMARY:{_text(summary)}"]
        lines += [f"LOCATION:{_text(location)}"] * bool(location)
        lines += [f"DESCRIPTION:{_text(description)}"] * bool(description)
        lines += [f"ATTENDEE:mailto:{a}" for a in attendees]
        return _calendar(lines + ["END:VEVENT"])

    @staticmethod
    def _set_event(ev: Any, fields: dict[str, Any]) -> None:
        """Set the given fields of a VEVENT (start/end as dates or aware datetimes)."""
        names = {"summary": "summary", "location": "location", "description": "description",
                 "start": "dtstart", "end": "dtend"}
        for key, prop in names.items():
            if key not in fields:
                continue
            ev.contents.pop(prop, None)
            value = fields[key]
            if key in ("start", "end"):
                ev.add(prop).value = _utc(value)
            elif value:
                ev.add(prop).value = value
        if "end" in fields:
            ev.contents.pop("duration", None)
        if "attendees" in fields:
            ev.contents.pop("attendee", None)
            for address in fields["attendees"]:
                ev.add("attendee").value = "mailto:" + address

    @staticmethod
    def _todo_ics(uid: str, summary: str, due: Any, done: bool) -> str:
        lines = ["BEGIN:VTODO", f"UID:{_text(uid)}", f"DTSTAMP:{_stamp()}", f"SUMMARY:{_text(summary)}"]
        lines += ["DUE" + _when(due)] * (due is not None)
        lines += ["STATUS:COMPLETED", f"COMPLETED:{_stamp()}", "PERCENT-COMPLETE:100"] if done else \
            ["STATUS:NEEDS-ACTION"]
        return _calendar(lines + ["END:VTODO"])

    @staticmethod
    def _vcard(uid: str, name: str, email: str, phone: str, org: str) -> str:
        given, _, family = name.strip().rpartition(" ")
        lines = ["BEGIN:VCARD", "VERSION:3.0", f"UID:{_text(uid)}", f"FN:{_text(name)}",
                 f"N:{_text(family)};{_text(given)};;;"]
        lines += [f"EMAIL;TYPE=INTERNET:{_text(email)}"] * bool(email)
        lines += [f"TEL:{_text(phone)}"] * bool(phone)
        lines += [f"ORG:{_text(org)}"] * bool(org)
        return "".join(_fold(line) for line in lines + ["END:VCARD"])

    def create_event(self, fields: dict[str, Any]) -> str:
        uid = new_uid()
        with self.lock(write=True):
            self._write(self.calendar, uid, ".ics", self._event_ics(
                uid, fields["summary"], fields["start"], fields["end"], fields.get("location", ""),
                fields.get("description", ""), fields.get("attendees", [])))
        return uid

    def find(self, kind: str, uid: str) -> tuple[Path, Any, Any] | None:
        """(file, its parsed calendar, the component) of the VEVENT/VTODO with this uid, or None."""
        import vobject

        for path, records in self._records(self.calendar):
            if any(k == kind and fields["uid"] == uid for k, fields in records):
                cal = vobject.readOne(path.read_text(encoding="utf-8", errors="replace"))
                for comp in getattr(cal, kind.lower() + "_list", []):
                    if "recurrence-id" not in comp.contents and str(comp.contents["uid"][0].value) == uid:
                        return path, cal, comp
        return None

    def event(self, uid: str) -> dict[str, Any] | None:
        with self.lock(write=False):
            for _, records in self._records(self.calendar):
                for kind, fields in records:
                    if kind == "VEVENT" and fields["uid"] == uid:
                        return copy.deepcopy(fields)
        return None

    def update_event(self, uid: str, fields: dict[str, Any]) -> bool:
        with self.lock(write=True):
            found = self.find("VEVENT", uid)
            if found is None:
                return False
            path, cal, comp = found
            self._set_event(comp, fields)
            _replace(path, cal.serialize())
        return True

    def delete(self, kind: str, uid: str) -> bool:
        with self.lock(write=True):
            found = self.find(kind, uid)
            if found is None:
                return False
            found[0].unlink()
        return True

    def create_todo(self, summary: str, due: Any) -> str:
        uid = new_uid()
        with self.lock(write=True):
            self._write(self.calendar, uid, ".ics", self._todo_ics(uid, summary, due, False))
        return uid

    def complete_todo(self, uid: str) -> dict[str, Any] | None:
        with self.lock(write=True):
            found = self.find("VTODO", uid)
            if found is None:
                return None
            path, cal, comp = found
            for prop in ("status", "completed", "percent-complete"):
                comp.contents.pop(prop, None)
            comp.add("status").value = "COMPLETED"
            comp.add("completed").value = datetime.now(_vutc()).replace(microsecond=0)
            comp.add("percent-complete").value = "100"
            _replace(path, cal.serialize())
            return self._todo(comp)

    def create_contact(self, name: str, email: str, phone: str, org: str) -> str:
        uid = new_uid()
        with self.lock(write=True):
            self._write(self.contacts_dir, uid, ".vcf", self._vcard(uid, name, email, phone, org))
        return uid


def _text(value: str) -> str:
    """An iCalendar/vCard TEXT value, escaped (RFC 5545 3.3.11)."""
    return (value.replace("\\", "\\\\").replace(";", "\\;").replace(",", "\\,")
            .replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n"))


def _when(value: Any) -> str:
    """`;VALUE=DATE:20261201` or `:20261201T090000Z` (a DTSTART/DTEND/DUE after its name)."""
    if isinstance(value, datetime):
        return ":" + value.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return ";VALUE=DATE:" + value.strftime("%Y%m%d")


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _fold(line: str) -> str:
    """One content line, folded at 75 octets (RFC 5545 3.1), with its CRLF."""
    data = line.encode()
    if len(data) <= 75:
        return line + "\r\n"
    parts, start = [], 0
    while start < len(data):
        end = min(start + (75 if not parts else 74), len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:  # not inside a UTF-8 sequence
            end -= 1
        parts.append(data[start:end].decode())
        start = end
    return "\r\n ".join(parts) + "\r\n"


def _calendar(component: list[str]) -> str:
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", f"PRODID:{PRODID}", *component, "END:VCALENDAR"]
    return "".join(_fold(line) for line in lines)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(".orchard-tmp-" + path.name)
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
