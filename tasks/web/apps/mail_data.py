"""The webmail's seeded mailbox: a dozen messages from colleagues, shops and services in the
inbox, a few archived. Same seed, same mailbox (a MailFixture dict)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

USER = ("Alex Morgan", "alex@orchard.test")
PEOPLE = [("Bob Stone", "bob.stone@acme.test"), ("Carol Meyer", "carol@orchard.test"),
          ("Dana Okafor", "dana.okafor@birch.test"), ("Erin Rossi", "erin@orchard.test"),
          ("Frank Tanaka", "frank.tanaka@cobalt.test"), ("Gina Novak", "gina@orchard.test"),
          ("Hugo Keller", "hugo.keller@fjord.test"), ("Ines Silva", "ines.silva@elmcatering.test")]
TOPICS = ["budget review", "roadmap sync", "hiring plan", "vendor onboarding", "launch checklist",
          "quarterly report", "design critique", "security audit"]
SERVICES = [("Harbor & Pine", "orders@harborpine.test", "Your order has shipped",
             "Good news: your order is on its way. Track it in your account."),
            ("Lorewiki", "notifications@lorewiki.test", "A page you watch was edited",
             "The page Port Alder was edited. See the history for details."),
            ("Harbor Works Rooms", "bookings@harborworks.test", "Your booking reminder",
             "This is a reminder of your room booking next week."),
            ("Tech Digest", "digest@technews.test", "Tech Digest: this week's picks",
             "Our best reads of the week. Unsubscribe any time.")]


def mailbox(seed: int, now: datetime) -> dict[str, Any]:
    rng = random.Random(f"mail-{seed}")
    messages: list[dict[str, Any]] = []
    n = 0

    def msg(sender: tuple[str, str], subject: str, body: str, hours_ago: float, unread: bool) -> dict[str, Any]:
        nonlocal n
        n += 1
        return {"id": f"m{n}", "from": f"{sender[0]} <{sender[1]}>", "to": [USER[1]], "subject": subject,
                "date": (now - timedelta(hours=hours_ago)).replace(microsecond=0).isoformat(), "body": body,
                "unread": unread}

    for person in rng.sample(PEOPLE, 6):
        topic = rng.choice(TOPICS)
        messages.append(msg(person, f"Notes from the {topic}",
                            f"Hi Alex,\nhere are my notes from the {topic}. "
                            f"Let's pick it up again on {rng.choice(['Monday', 'Wednesday', 'Friday'])}.\n"
                            f"{person[0].split()[0]}", rng.uniform(2, 120), rng.random() < 0.4))
    for name, address, subject, body in SERVICES:
        messages.append(msg((name, address), subject, body, rng.uniform(2, 200), rng.random() < 0.5))
    archived = [msg(rng.choice(PEOPLE), "Welcome to the team", "Welcome aboard, Alex!", 24 * 90, False),
                msg(rng.choice(PEOPLE), "Parking permit", "Your parking permit is ready at the front desk.",
                    24 * 40, False)]
    return {"address": USER[1], "name": USER[0], "mailboxes": {"INBOX": messages, "Archive": archived}}
