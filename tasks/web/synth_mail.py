"""Webmail task templates: answer from a message (the newer of two), reply with a fact from
another message, forward the right invoice, archive one sender's newsletters. The mailbox is the
seeded one (apps/mail_data.py) plus the task's own messages, all explicit in the fixture."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from orchard_cli.tasks.web.apps import mail_data
from orchard_cli.tasks.web.synth_kit import (NOW, Draw, answer, answer_check, click, fill, goto, request_check, role,
                                             state_check, template)

PEOPLE = [("Nils Berg", "nils.berg@acme.test"), ("Rita Duarte", "rita@cobalt.test"),
          ("Umar Haddad", "umar.haddad@birch.test"), ("Vera Lindqvist", "vera@fjord.test"),
          ("Kira Moreau", "kira.moreau@deltaprint.test")]
TOPICS = ["budget review", "roadmap sync", "hiring plan", "vendor onboarding", "launch checklist", "design critique"]
ROOMS = ["B-214", "C-017", "A-302", "D-110", "E-045"]
DAYS = ["Wednesday", "Thursday", "Friday"]
VENDORS = [("Acme Tools", "billing@acme.test"), ("Birch Logistics", "billing@birch.test"),
           ("Cobalt Labs", "invoices@cobalt.test"), ("Delta Print", "accounts@deltaprint.test")]
NEWSLETTERS = [("Garden Weekly", "news@gardenweekly.test"), ("Daily Deals", "deals@shopmail.test"),
               ("Travel Ideas", "hello@travelideas.test")]
ACCOUNTING = "accounting@orchard.test"


class Box:
    """The task's mailbox: the seeded one plus its own messages (ids t1, t2, ...)."""

    def __init__(self, d: Draw) -> None:
        self.d = d
        base = mail_data.mailbox(d.seed, NOW)
        self.address, self.name = base["address"], base["name"]
        self.inbox, self.archive = base["mailboxes"]["INBOX"], base["mailboxes"]["Archive"]
        self.base_inbox = len(self.inbox)
        self.n = 0

    def add(self, sender: tuple[str, str], subject: str, body: str, hours_ago: float, unread: bool = True) -> dict:
        self.n += 1
        msg = {"id": f"t{self.n}", "from": f"{sender[0]} <{sender[1]}>", "to": [self.address], "subject": subject,
               "date": (NOW - timedelta(hours=hours_ago)).isoformat(), "body": body, "unread": unread}
        self.inbox.append(msg)
        return msg

    def fixture(self) -> dict[str, Any]:
        inbox = sorted(self.inbox, key=lambda m: self.d.rng.random())
        return self.d.fixture(mail={"address": self.address, "name": self.name,
                                    "mailboxes": {"INBOX": inbox, "Archive": self.archive}})


def _search(query: str, subject: str) -> list[dict[str, Any]]:
    return [goto("mail:/search"), fill("#search-q", query), click(role("button", "Search")),
            click(role("link", subject))]


@template("mail-read", "mail")
def read(d: Draw) -> dict[str, Any]:
    box = Box(d)
    if d.rng.random() < 0.5:
        who, topic, day = d.rng.choice(PEOPLE), d.rng.choice(TOPICS), d.rng.choice(DAYS)
        h1, h2 = d.rng.sample([9, 10, 11, 13, 14, 15, 16], 2)
        box.add(who, f"{topic.capitalize()} on {day}", f"Hi Alex,\nlet's do the {topic} on {day} at {h1}:00 in "
                f"room {d.rng.choice(ROOMS)}.\n{who[0].split()[0]}", hours_ago=50, unread=False)
        new = box.add(who, f"New time: {topic}", f"Hi again,\nthe {topic} on {day} moves to {h2}:00. Same room.\n"
                      f"{who[0].split()[0]}", hours_ago=5)
        right, wrong = f"{h2}:00", f"{h1}:00"
        prompt = f"{who[0]} moved the {topic} on {day} by mail. At what time is it now?"
        steps = _search(topic, new["subject"])
    else:
        orders = d.rng.sample(range(100401, 100480), 2)
        tracks = [f"1Z{d.rng.randint(10**9, 10**10 - 1)}" for _ in orders]
        for i, (order, track) in enumerate(zip(orders, tracks)):
            box.add(("Harbor & Pine", "orders@harborpine.test"), f"Your order HP-{order} has shipped",
                    f"Good news: your order HP-{order} is on its way.\nTracking number: {track}\nHarbor & Pine",
                    hours_ago=10 + 30 * i)
        right, wrong = tracks[0], tracks[1]
        prompt = f"What is the tracking number of my Harbor & Pine order HP-{orders[0]}?"
        steps = _search(f"HP-{orders[0]}", f"Your order HP-{orders[0]} has shipped")
    return {"site": "mail", "category": "read", "difficulty": "easy", "prompt": prompt, "start": "/",
            "fixture": box.fixture(), "checks": [answer_check(includes=[right], excludes=[wrong])],
            "gold": [*steps, answer(right)], "near_miss": [*steps, answer(wrong)]}


@template("mail-reply", "mail")
def reply(d: Draw) -> dict[str, Any]:
    box = Box(d)
    asker, topic, day = d.rng.choice(PEOPLE), d.rng.choice(TOPICS), d.rng.choice(DAYS)
    room, old_room = d.rng.sample(ROOMS, 2)
    facilities = ("Facilities", "facilities@orchard.test")
    box.add(facilities, f"Room for the {topic}", f"The {topic} on {day} is in room {old_room}.", 70, unread=False)
    change = box.add(facilities, f"Room change: {topic}", f"Update: the {topic} on {day} moves to room {room}. "
                     f"Room {old_room} is no longer available.", 20, unread=False)
    ask = box.add(asker, f"Which room on {day}?", f"Hi Alex,\nwhich room is the {topic} in on {day}?\n"
                  f"Thanks, {asker[0].split()[0]}", 2)

    def steps(told: str) -> list[dict[str, Any]]:
        return [goto("mail:/mailbox/INBOX"), click(role("link", change["subject"])), goto("mail:/mailbox/INBOX"),
                click(role("link", ask["subject"])), click(role("link", "Reply")),
                fill("#body", f"Hi {asker[0].split()[0]}, the {topic} on {day} is in room {told}."),
                click(role("button", "Send")), answer("Replied.")]

    return {"site": "mail", "category": "reply", "difficulty": "medium",
            "prompt": f"{asker[0]} asked me which room the {topic} is in. Look it up in my mail and reply to their "
                      "message with the room.", "start": "/", "fixture": box.fixture(),
            "checks": [state_check("replied_with_room", "mail",
                                   f"SELECT to_addrs, in_reply_to, instr(body, '{room}') > 0 FROM messages "
                                   "WHERE mailbox = 'Sent'", [[asker[1], ask["id"], 1]]),
                       request_check("sent_once", "mail", "/send", {"in_reply_to": ask["id"]}, count=1)],
            "gold": steps(room), "near_miss": steps(old_room)}


@template("mail-forward", "mail")
def forward(d: Draw) -> dict[str, Any]:
    box = Box(d)
    vendors = d.rng.sample(VENDORS, 3)
    totals = {}
    for vendor in vendors:
        for month, hours in (("October", 24 * 31), ("November", 24 * 2)):
            total = f"{d.rng.uniform(200, 4000):,.2f}"
            totals[(vendor[0], month)] = total
            box.add(vendor, f"{vendor[0]}: invoice {month} 2026", f"Dear customer,\nyour invoice for {month} 2026 "
                    f"totals EUR {total}.\nKind regards, {vendor[0]}", hours + d.rng.randint(0, 20), unread=False)
    vendor = vendors[0][0]
    subject = f"{vendor}: invoice November 2026"

    def steps(month: str) -> list[dict[str, Any]]:
        return [*_search(vendor, f"{vendor}: invoice {month} 2026"), click(role("link", "Forward")),
                fill("#to", ACCOUNTING), click(role("button", "Send")), answer("Forwarded.")]

    return {"site": "mail", "category": "compose", "difficulty": "medium",
            "prompt": f"Forward the November invoice from {vendor} to our accounting team ({ACCOUNTING}).",
            "start": "/", "fixture": box.fixture(),
            "checks": [state_check("forwarded", "mail", "SELECT to_addrs, subject, instr(body, "
                                   f"'{totals[(vendor, 'November')]}') > 0 FROM messages WHERE mailbox = 'Sent'",
                                   [[ACCOUNTING, f"Fwd: {subject}", 1]]),
                       request_check("sent_once", "mail", "/send", {"to": ACCOUNTING}, count=1)],
            "gold": steps("November"), "near_miss": steps("October")}


@template("mail-archive", "mail")
def archive(d: Draw) -> dict[str, Any]:
    box = Box(d)
    letter = d.rng.choice(NEWSLETTERS)
    issues = [box.add(letter, f"{letter[0]} #{n}", "Our best picks of the week. Unsubscribe any time.",
                      hours_ago=24 * (4 - i) + d.rng.randint(0, 12))
              for i, n in enumerate(sorted(d.rng.sample(range(10, 99), d.rng.randint(3, 4))))]
    others = box.base_inbox

    def steps(count: int) -> list[dict[str, Any]]:
        out = []
        for msg in issues[:count]:
            out += [goto("mail:/mailbox/INBOX"), click(role("link", msg["subject"])), click(role("button", "Archive"))]
        return out + [answer("Archived.")]

    return {"site": "mail", "category": "archive", "difficulty": "easy",
            "prompt": f"Archive every {letter[0]} newsletter in my inbox. Leave all other mail where it is.",
            "start": "/", "fixture": box.fixture(),
            "checks": [state_check("archived", "mail", "SELECT count(*) FROM messages WHERE mailbox = 'Archive' "
                                   f"AND sender_addr = '{letter[1]}'", [[len(issues)]]),
                       state_check("others_stay", "mail", "SELECT count(*) FROM messages WHERE mailbox = 'INBOX'",
                                   [[others]]),
                       state_check("nothing_deleted", "mail", "SELECT count(*) FROM messages WHERE mailbox = 'Trash'",
                                   [[0]])],
            "gold": steps(len(issues)), "near_miss": steps(len(issues) - 1)}
