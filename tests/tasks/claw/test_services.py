"""The claw services with real servers (aiosmtpd, pymap, radicale) and real clients (imapclient,
smtplib, CalDAV/CardDAV over httpx): one set started for the module, reset before each test."""

from __future__ import annotations

import json
import os
import re
import smtplib
import subprocess
import sys
import time
from email.message import EmailMessage

import pytest

pytest.importorskip("aiosmtpd")
pytest.importorskip("pymap")
pytest.importorskip("radicale")
pytest.importorskip("vobject")
imapclient = pytest.importorskip("imapclient")
httpx = pytest.importorskip("httpx")

from jsonschema import Draft202012Validator  # noqa: E402

from orchard_cli.tasks.claw.services import ACTIONS, ClawServices, ServicesFixture  # noqa: E402
from orchard_cli.tools.spec import ToolSpec  # noqa: E402

FIXTURE = ServicesFixture.model_validate({
    "mail": {"address": "me@example.com", "name": "Alex Doe", "mailboxes": {
        "INBOX": [
            {"id": "m1", "from": "Bob Stone <bob@acme.test>", "to": ["me@example.com"], "subject": "Quarterly numbers",
             "date": "2026-11-30T09:00:00+01:00", "body": "Q3 revenue is up.", "unread": True},
            {"id": "m2", "from": "carol@acme.test", "to": ["me@example.com"], "cc": ["bob@acme.test"],
             "subject": "Re: Quarterly numbers", "date": "2026-11-30T10:30:00+01:00", "body": "Nice.",
             "in_reply_to": "m1"}],
        "Archive": [{"id": "m0", "from": "hr@acme.test", "to": ["me@example.com"], "subject": "Welcome",
                     "date": "2026-01-05T08:00:00+01:00", "body": "Welcome aboard"}]}},
    "calendar": {"timezone": "Europe/Berlin",
                 "events": [{"uid": "e1", "summary": "Standup", "start": "2026-12-01T10:00:00+01:00",
                             "end": "2026-12-01T10:15:00+01:00", "attendees": ["bob@acme.test"]}],
                 "todos": [{"uid": "t1", "summary": "File expenses", "due": "2026-12-05"}]},
    "contacts": [{"uid": "c1", "name": "Bob Stone", "email": "bob@acme.test", "phone": "+49 30 1234", "org": "Acme"}],
})
OTHER = ServicesFixture.model_validate({
    "mail": {"address": "sam@example.org", "mailboxes": {"INBOX": [
        {"id": "n1", "from": "Jürgen Müller <jm@corp.test>", "to": ["sam@example.org"], "subject": "Mittagessen?",
         "date": "2026-11-29T12:00:00+00:00", "body": "Schöne Grüße,\nJürgen"}]}},
})
MESSAGE_LIMIT = 300_000
"""The module's SMTP size limit (below the tool-argument cap, so that the server's own refusal is reached)."""
CALENDAR_QUERY = ('<?xml version="1.0"?><C:calendar-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">'
                  '<D:prop><D:getetag/><C:calendar-data/></D:prop>'
                  '<C:filter><C:comp-filter name="VCALENDAR"/></C:filter></C:calendar-query>')


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    services = ClawServices(tmp_path_factory.mktemp("claw-services"), message_limit=MESSAGE_LIMIT)
    services.start()
    yield services
    services.stop()


@pytest.fixture
def services(running):
    running.reset(FIXTURE)
    return running


def imap(services: ClawServices) -> imapclient.IMAPClient:
    client = imapclient.IMAPClient("127.0.0.1", services.ports()["imap"], ssl=False, timeout=10)
    creds = services.credentials()
    client.login(creds["user"], creds["password"])
    return client


def subjects(client: imapclient.IMAPClient, folder: str) -> list[str]:
    client.select_folder(folder)
    found = client.fetch(client.search("ALL"), ["ENVELOPE"])
    return sorted(v[b"ENVELOPE"].subject.decode() for v in found.values())


def dav(services: ClawServices) -> httpx.Client:
    creds = services.credentials()
    return httpx.Client(base_url=f"http://127.0.0.1:{services.ports()['caldav']}",
                        auth=(creds["user"], creds["password"]), timeout=10)


def caldav_summaries(services: ClawServices) -> list[str]:
    with dav(services) as client:
        reply = client.request("REPORT", f"/{services.credentials()['user']}/calendar/", content=CALENDAR_QUERY,
                               headers={"Depth": "1", "Content-Type": "application/xml"})
    assert reply.status_code == 207, reply.text
    return sorted(re.findall(r"SUMMARY:([^\r\n]*)", reply.text))


def smtp_send(services: ClawServices, to: list[str], subject: str, header_to: str | None = None) -> None:
    msg = EmailMessage()
    msg["From"] = "Alex Doe <me@example.com>"
    msg["To"] = header_to or ", ".join(to)
    msg["Subject"] = subject
    msg.set_content("sent by the agent's own client")
    creds = services.credentials()
    with smtplib.SMTP("127.0.0.1", services.ports()["smtp"], timeout=10) as smtp:
        smtp.login(creds["user"], creds["password"])
        smtp.send_message(msg, to_addrs=to)


def test_imap_sees_fixture_mail_and_mail_sent_over_smtp(services):
    client = imap(services)
    try:
        folders = {f[2] for f in client.list_folders()}
        assert {"INBOX", "Archive", "Sent", "Trash"} <= folders
        assert subjects(client, "INBOX") == ["Quarterly numbers", "Re: Quarterly numbers"]
        in_uid_order = client.fetch(client.search("ALL"), ["ENVELOPE", "THREADID"])
        assert [in_uid_order[uid][b"ENVELOPE"].subject for uid in sorted(in_uid_order)] == \
            [b"Quarterly numbers", b"Re: Quarterly numbers"]  # UIDs follow the dates, as on a real server
        assert len({v[b"THREADID"] for v in in_uid_order.values()}) == 1  # m2 answers m1
        assert subjects(client, "Archive") == ["Welcome"]
        smtp_send(services, ["me@example.com", "hidden@corp.test"], "Note to self", header_to="me@example.com")
        client.noop()
        assert "Note to self" in subjects(client, "INBOX")
        assert subjects(client, "Sent") == ["Note to self"]
    finally:
        client.logout()
    sent = services.snapshot()["mail"]["sent"]
    assert [(m["subject"], m["to"], m["bcc"]) for m in sent] == \
        [("Note to self", ["me@example.com"], ["hidden@corp.test"])]


def test_imap_changes_reach_the_snapshot(services):
    client = imap(services)
    try:
        client.select_folder("INBOX")
        uids = client.search(["SUBJECT", "Re: Quarterly"])
        client.move(uids, "Archive")
        client.select_folder("Archive")
        client.add_flags(client.search(["SUBJECT", "Welcome"]), [imapclient.DELETED])
        client.expunge()
    finally:
        client.logout()
    mailboxes = services.snapshot()["mail"]["mailboxes"]
    assert [m["id"] for m in mailboxes["INBOX"]] == ["m1"]
    assert [m["id"] for m in mailboxes["Archive"]] == ["m2"]


def test_mail_actions(services):
    listed = services.call("mail", "list_messages", {})
    assert [m["id"] for m in listed.result] == ["m2", "m1"] and listed.result[1]["unread"] is True
    assert [m["id"] for m in services.call("mail", "list_messages", {"unread_only": True}).result] == ["m1"]
    found = services.call("mail", "search_messages", {"query": "WELCOME"}).result
    assert [(m["id"], m["mailbox"]) for m in found] == [("m0", "Archive")]
    read = services.call("mail", "read_message", {"id": "m1"}).result
    assert read["body"] == "Q3 revenue is up." and read["unread"] is False
    assert services.call("mail", "move_message", {"id": "m1", "mailbox": "archive"}).result == \
        {"id": "m1", "mailbox": "Archive"}
    assert services.call("mail", "delete_message", {"id": "m2"}).result["mailbox"] == "Trash"
    assert services.call("mail", "mark_message", {"id": "m0", "unread": True}).ok
    reply = services.call("mail", "send_message", {"to": "Bob Stone <bob@acme.test>", "cc": ["carol@acme.test"],
                                                   "subject": "Re: Quarterly numbers", "body": "Thanks!",
                                                   "in_reply_to": "m1"})
    mail = services.snapshot()["mail"]
    assert {n: [m["id"] for m in ms] for n, ms in mail["mailboxes"].items()} == {
        "INBOX": [], "Archive": ["m0", "m1"], "Sent": [reply.result["id"]], "Trash": ["m2"]}
    assert mail["mailboxes"]["Archive"][0]["unread"] is True and mail["mailboxes"]["Archive"][1]["unread"] is False
    (sent,) = mail["sent"]
    assert sent["id"] == reply.result["id"] and sent["to"] == ["Bob Stone <bob@acme.test>"]
    assert sent["cc"] == ["carol@acme.test"] and sent["bcc"] == [] and sent["in_reply_to"] == "m1"
    assert sent["from"] == "Alex Doe <me@example.com>" and sent["body"] == "Thanks!"


def test_caldav_sees_fixture_events_and_tool_events(services):
    assert caldav_summaries(services) == ["File expenses", "Standup"]
    created = services.call("calendar", "create_event", {
        "summary": "Budget review", "start": "2026-12-02T14:00:00+01:00", "end": "2026-12-02T15:00:00+01:00",
        "attendees": ["bob@acme.test"]})
    assert created.ok
    assert caldav_summaries(services) == ["Budget review", "File expenses", "Standup"]
    moved = services.call("calendar", "update_event", {
        "uid": created.result["uid"], "summary": "Budget review (moved)", "start": "2026-12-03T16:00:00+01:00",
        "end": "2026-12-03T17:00:00+01:00"})
    assert (moved.result["summary"], moved.result["start"], moved.result["attendees"]) == \
        ("Budget review (moved)", "2026-12-03T16:00:00+01:00", ["bob@acme.test"])
    assert "Budget review (moved)" in caldav_summaries(services)
    on_the_3rd = services.call("calendar", "list_events", {"start": "2026-12-03T00:00:00+01:00", "end": "2026-12-04"})
    assert [e["uid"] for e in on_the_3rd.result] == [created.result["uid"]]


def test_a_clients_caldav_and_carddav_writes_reach_the_tools(services):
    user = services.credentials()["user"]
    event = ("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VEVENT\r\nUID:client-1\r\n"
             "DTSTAMP:20261130T080000Z\r\nDTSTART;TZID=Europe/Berlin:20261203T090000\r\n"
             "DTEND;TZID=Europe/Berlin:20261203T093000\r\nSUMMARY:Dentist\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n")
    card = ("BEGIN:VCARD\r\nVERSION:3.0\r\nUID:client-c\r\nFN:Dana Lee\r\nN:Lee;Dana;;;\r\n"
            "EMAIL:dana@corp.test\r\nEND:VCARD\r\n")
    with dav(services) as client:
        assert client.put(f"/{user}/calendar/client-1.ics", content=event,
                          headers={"Content-Type": "text/calendar"}).status_code == 201
        assert client.put(f"/{user}/contacts/client-c.vcf", content=card,
                          headers={"Content-Type": "text/vcard"}).status_code == 201
        listing = client.request("PROPFIND", f"/{user}/contacts/", headers={"Depth": "1"})
        assert listing.status_code == 207 and "c1.vcf" in listing.text
    events = services.call("calendar", "list_events", {"start": "2026-12-03", "end": "2026-12-04"}).result
    assert [(e["uid"], e["start"], e["end"]) for e in events] == \
        [("client-1", "2026-12-03T09:00:00+01:00", "2026-12-03T09:30:00+01:00")]
    found = services.call("contacts", "search_contacts", {"query": "corp.test"}).result
    assert [c["uid"] for c in found] == ["client-c"]


def test_todos_and_contacts(services):
    assert [t["uid"] for t in services.call("calendar", "list_todos", {}).result] == ["t1"]
    new = services.call("calendar", "create_todo", {"summary": "Book flights", "due": "2026-12-10T18:00:00+01:00"})
    assert services.call("calendar", "complete_todo", {"uid": "t1"}).result["done"] is True
    assert [t["uid"] for t in services.call("calendar", "list_todos", {}).result] == [new.result["uid"]]
    assert len(services.call("calendar", "list_todos", {"include_done": True}).result) == 2
    uid = services.call("contacts", "create_contact", {"name": "Eve Moss", "email": "eve@moss.test", "org": "Moss"})
    assert [c["name"] for c in services.call("contacts", "search_contacts", {"query": "moss"}).result] == ["Eve Moss"]
    assert uid.result["uid"] in {c["uid"] for c in services.snapshot()["contacts"]}
    assert services.call("calendar", "delete_event", {"uid": "e1"}).ok
    assert services.snapshot()["calendar"]["events"] == []


def test_reset_leaves_exactly_the_new_fixture(services):
    stale = imap(services)
    smtp_send(services, ["me@example.com"], "Attempt one mail")
    services.call("calendar", "create_event", {"summary": "Attempt one event", "start": "2026-12-01T09:00:00+00:00",
                                               "end": "2026-12-01T10:00:00+00:00"})
    services.reset(OTHER)
    snap = services.snapshot()
    assert snap == {"mail": {"address": "sam@example.org", "mailboxes": {
        "INBOX": [{"id": "n1", "from": "Jürgen Müller <jm@corp.test>", "to": ["sam@example.org"], "cc": [],
                   "subject": "Mittagessen?", "date": "2026-11-29T12:00:00+00:00", "body": "Schöne Grüße,\nJürgen",
                   "unread": False, "in_reply_to": None}],
        "Archive": [], "Sent": [], "Trash": []}, "sent": []},
        "calendar": {"events": [], "todos": []}, "contacts": []}
    fresh = imap(services)
    try:
        assert subjects(fresh, "INBOX") == ["Mittagessen?"] and subjects(fresh, "Sent") == []
    finally:
        fresh.logout()
    with pytest.raises(Exception):  # noqa: B017 - the previous attempt's session is cut off, however it shows
        stale.select_folder("INBOX")
        stale.noop()
    assert caldav_summaries(services) == []
    assert all(text == "" or "Attempt one" not in text for text in services.protocol_log().values())
    assert services.failed() is None


def test_refusals(services):
    cases = [
        (("mail", "read_message", {"id": "nope"}), 404),
        (("mail", "list_messages", {"mailbox": "Nowhere"}), 404),
        (("mail", "move_message", {"id": "m1", "mailbox": "Nowhere"}), 404),
        (("mail", "send_message", {"to": "bob@acme.test", "subject": "x", "body": "y", "in_reply_to": "nope"}), 404),
        (("mail", "send_message", {"to": "not an address", "subject": "x", "body": "y"}), 400),
        (("calendar", "update_event", {"uid": "nope", "summary": "x"}), 404),
        (("calendar", "delete_event", {"uid": "nope"}), 404),
        (("calendar", "complete_todo", {"uid": "nope"}), 404),
        (("calendar", "create_event", {"summary": "x", "start": "tomorrow", "end": "2026-12-01T10:00:00+01:00"}), 400),
        (("calendar", "create_event", {"summary": "x", "start": "2026-12-01T10:00:00+01:00",
                                       "end": "2026-12-01T09:00:00+01:00"}), 400),
        (("calendar", "update_event", {"uid": "e1", "end": "2026-11-30T10:00:00+01:00"}), 400),
        (("calendar", "list_events", {"start": "soon"}), 400),
        (("contacts", "create_contact", {"name": "X", "email": "nobody"}), 400),
        (("mail", "read_message", {"id": "m1", "extra": 1}), 400),
        (("mail", "list_messages", {"limit": 0}), 400),
        (("mail", "fly", {}), 404),
    ]
    for (service, action, arguments), status in cases:
        reply = services.call(service, action, arguments)
        assert (reply.ok, reply.status) == (False, status), (action, arguments, reply)
        assert reply.error
    assert services.snapshot()["mail"]["sent"] == []


def test_any_text_an_agent_writes_is_sent_and_a_refusal_is_the_agents_to_read(services):
    """A body of one 1,249-character line, long non-ASCII text, and one over the server's size
    limit, sent through a ToolSession as an agent's call is: the first two are sent (quoted-
    printable, no line of the message over 998 bytes) and read back as written; the third is the
    server's 552 as a 413 reply, and the service is not counted as failed."""
    from orchard_cli.tools import ToolSession

    spec = ToolSpec(name="send_message", service="mail", action="send_message", description="send",
                    input_schema=ACTIONS["mail"]["send_message"]["input_schema"])
    session = ToolSession([spec], services)
    paragraph = ("The quarterly review moved to Thursday; bring the numbers for the two regions and the "
                 "notes from the last call. ") * 12
    paragraph = paragraph[:1249]
    german = "Schöne Grüße aus München, wir sehen uns übermorgen – 東京でも会いましょう. " * 40
    for body in (paragraph, german):
        reply = session.call("send_message", {"to": "bob@acme.test", "subject": "Üpdate", "body": body})
        assert reply.ok and reply.status == 200, reply
        (item,) = [m for m in services.snapshot()["mail"]["sent"] if m["id"] == reply.result["id"]]
        assert item["body"] == body and item["subject"] == "Üpdate"
        read = services.call("mail", "read_message", {"id": reply.result["id"]}).result
        assert read["body"] == body
    raw = [p for p in (services.root / "imap").rglob("*") if p.is_file() and b"quoted-printable" in p.read_bytes()]
    assert raw and max(len(line) for line in raw[0].read_bytes().splitlines()) <= 998
    big = session.call("send_message", {"to": "bob@acme.test", "subject": "the scan", "body": "x" * (MESSAGE_LIMIT + 1000)})
    assert (big.ok, big.status) == (False, 413) and "552" in big.error, big
    assert session.failure is None and services.failed() is None
    assert session.call("send_message", {"to": "bob@acme.test", "subject": "ok", "body": "still here"}).ok


def test_snapshot_shape(services):
    services.call("mail", "send_message", {"to": ["bob@acme.test"], "subject": "Hi", "body": "Hello"})
    snap = services.snapshot()
    assert set(snap) == {"mail", "calendar", "contacts"}
    assert set(snap["mail"]) == {"address", "mailboxes", "sent"}
    assert list(snap["mail"]["mailboxes"]) == ["INBOX", "Archive", "Sent", "Trash"]
    message_keys = {"id", "from", "to", "cc", "subject", "date", "body", "unread", "in_reply_to"}
    assert all(set(m) == message_keys for ms in snap["mail"]["mailboxes"].values() for m in ms)
    assert [m["id"] for m in snap["mail"]["mailboxes"]["INBOX"]] == ["m1", "m2"]
    assert snap["mail"]["mailboxes"]["INBOX"][1]["in_reply_to"] == "m1"
    assert set(snap["mail"]["sent"][0]) == {"id", "from", "to", "cc", "bcc", "recipients", "subject", "body",
                                            "in_reply_to", "date"}
    assert snap["mail"]["sent"][0]["recipients"] == ["bob@acme.test"]
    assert snap["calendar"]["events"] == [{"uid": "e1", "summary": "Standup", "start": "2026-12-01T10:00:00+01:00",
                                           "end": "2026-12-01T10:15:00+01:00", "location": "", "description": "",
                                           "attendees": ["bob@acme.test"]}]
    assert snap["calendar"]["todos"] == [{"uid": "t1", "summary": "File expenses", "due": "2026-12-05", "done": False}]
    assert snap["contacts"] == [{"uid": "c1", "name": "Bob Stone", "email": "bob@acme.test", "phone": "+49 30 1234",
                                 "org": "Acme"}]
    assert snap == services.snapshot()


def test_protocol_log_has_commands_not_passwords(services):
    password = services.credentials()["password"]
    client = imap(services)
    client.select_folder("INBOX")
    client.logout()
    smtp_send(services, ["bob@acme.test"], "Logged")
    caldav_summaries(services)
    log = services.protocol_log()
    assert "LOGIN me ***" in log["imap"] and 'SELECT "INBOX"' in log["imap"]
    assert "AUTH PLAIN me ok" in log["smtp"] and "RCPT TO:<bob@acme.test>" in log["smtp"]
    assert "REPORT /me/calendar/ depth 1 -> 207" in log["caldav"]
    assert services.failed() is None
    assert "OPTIONS" not in services.protocol_log()["caldav"]  # the liveness probe is not the agent's
    assert all(password not in text for text in log.values())
    services.reset(FIXTURE)
    assert services.protocol_log() == {"smtp": "", "imap": "", "caldav": ""}


@pytest.mark.parametrize("bad", [
    {"mail": {"adress": "me@example.com"}},
    {"calendar": {"events": [{"uid": "e", "summary": "x", "start": "2026-12-01T10:00:00+01:00",
                              "end": "2026-12-01T09:00:00+01:00"}]}},
    {"calendar": {"events": [{"uid": "e", "summary": "x", "start": "2026-12-01T10:00:00",
                              "end": "2026-12-01T11:00:00"}]}},
    {"calendar": {"timezone": "Mars/Olympus"}},
    {"mail": {"mailboxes": {"INBOX": [{"id": "m", "from": "a@b", "date": "2026-12-01T10:00:00Z"}],
                            "Archive": [{"id": "m", "from": "a@b", "date": "2026-12-01T10:00:00Z"}]}}},
    {"mail": {"mailboxes": {"Work.2026": []}}},
    {"contacts": [{"uid": "c", "name": "A"}, {"uid": "c", "name": "B"}]},
])
def test_fixture_refuses_mistakes(bad):
    with pytest.raises(ValueError):
        ServicesFixture.model_validate(bad)


def test_actions_catalogue_builds_tool_specs():
    for service, actions in ACTIONS.items():
        for action, entry in actions.items():
            Draft202012Validator.check_schema(entry["input_schema"])
            assert not re.search(r'"(anyOf|oneOf|minimum|maximum|pattern|format)"', json.dumps(entry)), (action, entry)
            spec = ToolSpec(name=action, description=entry["description"], input_schema=entry["input_schema"],
                            service=service, action=action)
            assert spec.public()["description"]


def test_failed_names_a_killed_server_and_stop_leaves_nothing(tmp_path):
    services = ClawServices(tmp_path)
    services.start()
    try:
        assert services.failed() is None
        procs = dict(services._procs)
        os.kill(procs["caldav"].pid, 9)
        deadline = time.monotonic() + 5
        while services.failed() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "caldav" in services.failed() and "radicale" in services.failed()
    finally:
        services.stop()
        services.stop()
    assert all(proc.poll() is not None for proc in procs.values())
    assert services.failed() == "the services are not started"
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert left == []


def test_servers_end_when_the_process_that_started_them_is_killed(tmp_path):
    script = ("import json, sys, time\nfrom pathlib import Path\n"
              "from orchard_cli.tasks.claw.services import ClawServices\n"
              "services = ClawServices(Path(sys.argv[1])); services.start()\n"
              "print(json.dumps([p.pid for p in services._procs.values()]), flush=True)\ntime.sleep(60)\n")
    owner = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(owner.stdout.readline())
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
