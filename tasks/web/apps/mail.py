"""Webmail over the claw family's Maildir store (MailStore): folders, reading, compose/send,
reply, forward, move/archive/delete, search. Sending delivers into the Maildir: a copy in Sent
and, when the user's own address is a recipient, one in INBOX (as claw's SMTP server does).

    GET  /mailbox/{name}            the folder's messages, newest first
    GET  /message/{id}              a message (reading marks it read)
    POST /message/{id}/move         folder -> 303 back to the folder it was in
    GET  /compose[?reply=ID|forward=ID]   POST /send: to, cc, subject, body, in_reply_to -> 303 /mailbox/Sent
    GET  /search?q=                 every folder

State: the Maildir; `query` runs SQL over a table `messages` built from it (mailbox, id, sender,
sender_addr, to_addrs, cc_addrs, subject, body, date, unread, in_reply_to; addresses bare and
lower case, comma-separated).
"""

from __future__ import annotations

import email.utils
import re
import shutil
import sqlite3
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from orchard_cli.tasks.kit.mailfixture import MailFixture
from orchard_cli.tasks.kit.mailstore import MailStore, display_address, render
from orchard_cli.tasks.web.apps import mail_data
from orchard_cli.tasks.web.apps.fixture import WebFixture
from orchard_cli.tasks.web.apps.kit import (Clock, Request, Response, Router, button, esc, form, hidden, not_found,
                                            page, redirect, search_form, seg, select, table, text_input, textarea, url)

ROUTES = Router()
TITLE = "Orchard Mail"
EMAIL = re.compile(r"^[^@\s<>,;]+@[^@\s<>,;]+\.[A-Za-z]{2,}$")
SCHEMA = ("CREATE TABLE messages(mailbox TEXT, id TEXT, sender TEXT, sender_addr TEXT, to_addrs TEXT, "
          "cc_addrs TEXT, subject TEXT, body TEXT, date TEXT, unread INTEGER, in_reply_to TEXT)")


def _bare(values: list[str]) -> list[str]:
    return [email.utils.parseaddr(v)[1].lower() for v in values]


class Webmail:
    name = "mail"
    title = TITLE

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._attempt = 0
        self.store: MailStore | None = None
        self.address, self.user = mail_data.USER[1], mail_data.USER[0]
        self.clock = Clock(WebFixture().clock())

    def reset(self, fixture: WebFixture) -> None:
        part = fixture.mail or MailFixture.model_validate(mail_data.mailbox(fixture.seed, fixture.clock()))
        self._attempt += 1
        home = self.folder / f"a{self._attempt}"
        shutil.rmtree(home, ignore_errors=True)
        self.store = MailStore.build(home, part)
        for stale in self.folder.glob("a*"):
            if stale != home:
                shutil.rmtree(stale, ignore_errors=True)
        self.address, self.user, self.clock = part.address, part.name, Clock(fixture.clock())

    def handle(self, request: Request) -> Response:
        return ROUTES.dispatch(self, request)

    def nav(self) -> list[tuple[str, str]]:
        return [("/compose", "Compose"), ("/mailbox/INBOX", "Inbox"), ("/search", "Search mail")]

    def query(self, sql: str) -> list[list[Any]]:
        conn = sqlite3.connect(":memory:")
        try:
            conn.execute(SCHEMA)
            for name in self.mail.mailboxes():
                for _, m in self.mail.messages(name):
                    conn.execute("INSERT INTO messages VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                                 (name, m["id"], m["from"], (_bare([m["from"]]) or [""])[0], ", ".join(_bare(m["to"])),
                                  ", ".join(_bare(m["cc"])), m["subject"], m["body"], m["date"], int(m["unread"]),
                                  m["in_reply_to"]))
            conn.execute("PRAGMA query_only = ON")
            return [list(row) for row in conn.execute(sql).fetchall()]
        finally:
            conn.close()

    def snapshot(self) -> dict[str, Any]:
        return {name: [{"id": m["id"], "from": m["from"], "to": m["to"], "subject": m["subject"], "unread": m["unread"]}
                       for m in msgs] for name, msgs in self.mail.snapshot().items()}

    @property
    def mail(self) -> MailStore:
        if self.store is None:
            raise RuntimeError("the mailbox is not built (reset first)")
        return self.store

    def page(self, title: str, body: str, status: int = 200, **flash: str) -> Response:
        folders = "".join(f"<li><a href='/mailbox/{seg(n)}'>{esc(n)}</a> ({self._unread(n)} unread)</li>"
                          for n in self.mail.mailboxes())
        aside = f"<aside><nav aria-label='Folders'><h2>Folders</h2><ul>{folders}</ul></nav></aside>"
        return Response(status, page(self.title, title, aside + f"<div class='results'>{body}</div>",
                                     self.nav(), **flash))

    def _unread(self, mailbox: str) -> int:
        return sum(1 for item in self.mail.items(mailbox) if item.unread)

    def when(self, iso: str) -> str:
        try:
            return datetime.fromisoformat(iso).astimezone(self.clock.start.tzinfo).strftime("%Y-%m-%d %H:%M")
        except ValueError:
            return iso


def _newest(found: list[tuple[Any, dict[str, Any]]]) -> list[tuple[Any, dict[str, Any]]]:
    return sorted(found, key=lambda pair: (datetime.fromisoformat(pair[1]["date"]).timestamp(), pair[1]["id"]),
                  reverse=True)


def _rows(mail: Webmail, found: list[tuple[Any, dict[str, Any]]], with_folder: bool = False) -> str:
    rows = []
    for item, m in _newest(found):
        subject = esc(m["subject"] or "(no subject)")
        link = f"<a href='/message/{seg(m['id'])}'>{'<strong>' + subject + '</strong>' if m['unread'] else subject}</a>"
        row = [esc(m["from"]), link, esc(mail.when(m["date"])), "unread" if m["unread"] else ""]
        rows.append(([esc(item.mailbox)] if with_folder else []) + row)
    headers = (["Folder"] if with_folder else []) + ["From", "Subject", "Date", "Status"]
    return table(headers, rows, caption="Messages") if rows else "<p>No messages.</p>"


@ROUTES.get("/")
def home(mail: Webmail, req: Request) -> Response:
    return redirect("/mailbox/INBOX", 302)


@ROUTES.get("/mailbox/{name}")
def mailbox(mail: Webmail, req: Request, name: str) -> Response:
    if not mail.mail.exists(name):
        return not_found(mail, "No such folder.")
    notice = {"sent": "Message sent.", "moved": f"Message moved to {req.arg('to')}."}.get(req.arg("done"), "")
    return mail.page(name, _rows(mail, mail.mail.messages(name)), notice=notice)


@ROUTES.get("/message/{mid}")
def message(mail: Webmail, req: Request, mid: str) -> Response:
    found = mail.mail.find(mid)
    if found is None:
        return not_found(mail, "No such message.")
    item, m = found
    if item.unread:
        mail.mail.set_unread(item, False)
    head = [("From", m["from"]), ("To", ", ".join(m["to"])), ("Cc", ", ".join(m["cc"])),
            ("Date", mail.when(m["date"])), ("Folder", item.mailbox)]
    rows = "".join(f"<tr><th scope='row'>{k}</th><td>{esc(v)}</td></tr>" for k, v in head if v)
    body = "".join(f"<p>{esc(line)}</p>" if line.strip() else "" for line in m["body"].split("\n"))
    others = [n for n in mail.mail.mailboxes() if n != item.mailbox]
    to = f"/message/{seg(m['id'])}/move"
    actions = (f"<p><a href='{esc(url('/compose', reply=m['id']))}'>Reply</a> · "
               f"<a href='{esc(url('/compose', forward=m['id']))}'>Forward</a></p>"
               + (form(to, hidden("folder", "Archive") + button("Archive"), label="Archive")
                  if item.mailbox != "Archive" else "")
               + (form(to, hidden("folder", "Trash") + button("Delete"), label="Delete")
                  if item.mailbox != "Trash" else "")
               + form(to, select("folder", "Move to folder", [(n, n) for n in others]) + button("Move"), label="Move"))
    return mail.page(m["subject"] or "(no subject)",
                     f"<table aria-label='Headers'>{rows}</table><article aria-label='Message body'>{body}</article>"
                     + actions)


@ROUTES.post("/message/{mid}/move")
def move(mail: Webmail, req: Request, mid: str) -> Response:
    found = mail.mail.find(mid)
    target = req.field("folder")
    if found is None:
        return not_found(mail, "No such message.")
    if not mail.mail.exists(target):
        return mail.page("Not moved", f"<p>There is no folder {esc(target)}.</p>", status=422)
    mail.mail.move(found[0], target)
    return redirect(url(f"/mailbox/{seg(found[0].mailbox)}", done="moved", to=target))


def _quote(m: dict[str, Any], when: str) -> str:
    return f"\n\nOn {when}, {m['from']} wrote:\n" + "\n".join(f"> {line}" for line in m["body"].split("\n"))


@ROUTES.get("/compose")
def compose(mail: Webmail, req: Request, errors: dict[str, str] | None = None) -> Response:
    values = {k: req.field(k) for k in ("to", "cc", "subject", "body", "in_reply_to")}
    if req.method == "GET":
        reply = mail.mail.find(req.arg("reply")) if req.arg("reply") else None
        forward = mail.mail.find(req.arg("forward")) if req.arg("forward") else None
        if reply:
            m = reply[1]
            subject = m["subject"] if m["subject"].lower().startswith("re:") else f"Re: {m['subject']}"
            values.update(to=(_bare([m["from"]]) or [""])[0], subject=subject, in_reply_to=m["id"],
                          body=_quote(m, mail.when(m["date"])))
        elif forward:
            m = forward[1]
            values.update(subject=f"Fwd: {m['subject']}", body=f"\n\n---------- Forwarded message ----------\n"
                          f"From: {m['from']}\nSubject: {m['subject']}\n\n{m['body']}")
    errors = errors or {}
    fields = (text_input("to", "To", values["to"], error=errors.get("to", ""))
              + text_input("cc", "Cc", values["cc"], error=errors.get("cc", ""))
              + text_input("subject", "Subject", values["subject"], size="60")
              + textarea("body", "Message", values["body"], rows=14)
              + hidden("in_reply_to", values["in_reply_to"]) + button("Send"))
    return mail.page("New message", form("/send", fields, label="Compose"), status=422 if errors else 200,
                     alert="The message was not sent." if errors else "")


def _addresses(text: str) -> list[str] | None:
    found = [a.strip() for a in re.split(r"[,;]", text) if a.strip()]
    return found if all(EMAIL.match(email.utils.parseaddr(a)[1] or "") for a in found) else None


@ROUTES.post("/send")
def send(mail: Webmail, req: Request) -> Response:
    to, cc = _addresses(req.field("to")), _addresses(req.field("cc"))
    errors = {}
    if not to:
        errors["to"] = "Enter at least one recipient." if to == [] else "Enter valid e-mail addresses, comma-separated."
    if cc is None:
        errors["cc"] = "Enter valid e-mail addresses, comma-separated."
    if errors:
        return compose(mail, req, errors)
    parent = req.field("in_reply_to").strip()
    parent = parent if parent and mail.mail.find(parent) else None
    body = req.field("body").replace("\r\n", "\n").replace("\r", "\n")
    raw = render(f"w-{uuid.uuid4().hex[:12]}", display_address(mail.user, mail.address), to, cc or [],
                 req.field("subject").strip(), body, mail.clock.now(), parent)
    mail.mail.deliver(raw, "Sent", seen=True)
    if mail.address.lower() in _bare(to + (cc or [])):
        mail.mail.deliver(raw, "INBOX", seen=False)
    return redirect(url("/mailbox/Sent", done="sent"))


@ROUTES.get("/search")
def search(mail: Webmail, req: Request) -> Response:
    q = req.arg("q").strip()
    body = search_form("/search", q, "Search mail")
    if q:
        words = q.lower().split()
        found = [(item, m) for name in mail.mail.mailboxes() for item, m in mail.mail.messages(name)
                 if all(w in " ".join([m["from"], m["subject"], m["body"], *m["to"]]).lower() for w in words)]
        body += f"<p role='status'>{len(found)} messages</p>" + _rows(mail, found, with_folder=True)
    return mail.page(f"Search results for {q}" if q else "Search mail", body)
