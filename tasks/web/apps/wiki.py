"""The wiki: pages with a history of revisions, search, edit (with a summary) and old revisions
(restoring one is an edit of its text).

    GET  /                          all pages, search
    GET  /search?q=                 titles and text
    GET  /wiki/{slug}[?rev=N]       a page (or its revision N)
    GET  /wiki/{slug}/edit[?rev=N]  POST: text, summary (title for a new page) -> 303 /wiki/{slug}
    GET  /wiki/{slug}/history       revisions: number, date, author, summary
    GET  /recent                    recent changes of every page

State: tables pages (id, slug, title, latest) and revisions (id, page_id, number, author, summary,
at, text); the view `latest` is each page's current revision (slug, title, number, author, summary, at, text).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from orchard_cli.tasks.web.apps import wiki_data
from orchard_cli.tasks.web.apps.db import Database, Images, image
from orchard_cli.tasks.web.apps.fixture import PageFixture, WebFixture, WikiFixture
from orchard_cli.tasks.web.apps.kit import (Clock, Request, Response, Router, button, esc, form, not_found, page,
                                            redirect, search_form, seg, table, text_input, textarea, url)

SCHEMA = """
CREATE TABLE pages(id INTEGER PRIMARY KEY, slug TEXT UNIQUE, title TEXT, latest INTEGER);
CREATE TABLE revisions(id INTEGER PRIMARY KEY, page_id INTEGER REFERENCES pages(id), number INTEGER,
  author TEXT, summary TEXT, at TEXT, text TEXT);
CREATE VIEW latest AS SELECT p.slug, p.title, r.number, r.author, r.summary, r.at, r.text
  FROM pages p JOIN revisions r ON r.id = p.latest;
"""
ROUTES = Router()


class Wiki:
    name = "wiki"

    def __init__(self, folder: Path) -> None:
        self.db = Database(Path(folder) / "wiki.sqlite")
        self._images = Images()
        self.title, self.user = WikiFixture().title, WikiFixture().user
        self.clock = Clock(WebFixture().clock())

    def reset(self, fixture: WebFixture) -> None:
        part = fixture.wiki or WikiFixture()
        key = json.dumps([fixture.seed, fixture.now, part.model_dump(mode="json")], sort_keys=True)
        self.db.load(self._images.get(key, lambda: image(SCHEMA, lambda c: _fill(c, part, fixture))))
        self.title, self.user, self.clock = part.title, part.user, Clock(fixture.clock())

    def handle(self, request: Request) -> Response:
        return ROUTES.dispatch(self, request)

    def nav(self) -> list[tuple[str, str]]:
        return [("/", "All pages"), ("/recent", "Recent changes"), ("/search", "Search")]

    def query(self, sql: str) -> list[list[Any]]:
        return self.db.query(sql)

    def snapshot(self) -> dict[str, Any]:
        rows = self.db.all("SELECT slug, number, author, summary FROM latest ORDER BY slug")
        return {"pages": [{"slug": r["slug"], "revisions": r["number"], "latest": [r["author"], r["summary"]]}
                          for r in rows]}

    def page(self, title: str, body: str, status: int = 200, **flash: str) -> Response:
        return Response(status, page(self.title, title, body, self.nav(), **flash))


def _fill(conn: sqlite3.Connection, part: WikiFixture, fixture: WebFixture) -> None:
    pages = part.pages if part.pages is not None else \
        [PageFixture.model_validate(p) for p in wiki_data.pages(fixture.seed, fixture.clock())]
    ids = {}
    for p in pages:
        ids[p.slug] = conn.execute("INSERT INTO pages(slug, title) VALUES (?, ?)", (p.slug, p.title)).lastrowid
        for r in p.revisions:
            _revise(conn, ids[p.slug], r.author, r.summary, r.at, r.text)
    for e in part.edits:
        if e.slug not in ids:
            raise ValueError(f"bad web fixture at wiki.edits: no page {e.slug!r}")
        _revise(conn, ids[e.slug], e.author, e.summary, e.at, e.text)


def _revise(conn: sqlite3.Connection, page_id: int, author: str, summary: str, at: str, text: str) -> None:
    """A new revision of the page, now its latest."""
    number = conn.execute("SELECT coalesce(max(number), 0) + 1 FROM revisions WHERE page_id = ?",
                          (page_id,)).fetchone()[0]
    rev = conn.execute("INSERT INTO revisions(page_id, number, author, summary, at, text) VALUES (?,?,?,?,?,?)",
                       (page_id, number, author, summary, at, text)).lastrowid
    conn.execute("UPDATE pages SET latest = ? WHERE id = ?", (rev, page_id))


def render(text: str) -> str:
    """The markup as HTML: `== Heading ==`, `| a | b |` table rows, `* item` lists, paragraphs."""
    out: list[str] = []
    rows: list[list[str]] = []
    items: list[str] = []

    def flush() -> None:
        if rows:
            out.append("<table>" + "".join(
                f"<tr><th scope='row'>{esc(r[0])}</th>" + "".join(f"<td>{esc(c)}</td>" for c in r[1:]) + "</tr>"
                for r in rows) + "</table>")
            rows.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("|") and line.endswith("|") and len(line) > 1:
            rows.append([c.strip() for c in line.strip("|").split("|")])
            continue
        if line.startswith("* "):
            items.append(line[2:])
            continue
        flush()
        if line.startswith("==") and line.endswith("==") and len(line) > 4:
            out.append(f"<h2>{esc(line.strip('= '))}</h2>")
        elif line:
            out.append(f"<p>{esc(line)}</p>")
    flush()
    return "".join(out)


def _page(wiki: Wiki, slug: str) -> sqlite3.Row | None:
    return wiki.db.one("SELECT * FROM pages WHERE slug = ?", slug)


@ROUTES.get("/")
def home(wiki: Wiki, req: Request) -> Response:
    pages = wiki.db.all("SELECT slug, title FROM pages ORDER BY title")
    items = "".join(f"<li><a href='/wiki/{seg(p['slug'])}'>{esc(p['title'])}</a></li>" for p in pages)
    body = search_form("/search", "", "Search the wiki") + f"<h2>All pages</h2><ul>{items}</ul>"
    return wiki.page("Main page", body)


@ROUTES.get("/search")
def search(wiki: Wiki, req: Request) -> Response:
    q = req.arg("q").strip()
    body = search_form("/search", q, "Search the wiki")
    if q:
        where = " AND ".join(["lower(title || ' ' || text) LIKE ?"] * len(q.split()))
        found = wiki.db.all(f"SELECT slug, title, text FROM latest WHERE {where} ORDER BY title",
                            *[f"%{w.lower()}%" for w in q.split()])
        items = "".join(f"<li><a href='/wiki/{seg(r['slug'])}'>{esc(r['title'])}</a>"
                        f"<p>{esc(r['text'].splitlines()[0][:160])}</p></li>" for r in found)
        body += f"<p role='status'>{len(found)} results</p><ul>{items}</ul>"
    return wiki.page(f"Search results for {q}" if q else "Search", body)


@ROUTES.get("/wiki/{slug}")
def view(wiki: Wiki, req: Request, slug: str) -> Response:
    p = _page(wiki, slug)
    if p is None:
        return Response(404, page(wiki.title, slug.replace("-", " ").title(),
                                  f"<p>There is no page with this name yet.</p><p><a href='/wiki/{seg(slug)}/edit'>"
                                  "Create this page</a></p>", wiki.nav()))
    rev = wiki.db.one("SELECT * FROM revisions WHERE page_id = ? AND number = ?", p["id"], req.arg("rev")) \
        if req.arg("rev") else wiki.db.one("SELECT * FROM revisions WHERE id = ?", p["latest"])
    if rev is None:
        return not_found(wiki, "No such revision.")
    old = rev["id"] != p["latest"]
    note = (f"<p class='alert' role='note'>This is an old revision ({rev['number']}) of this page, by "
            f"{esc(rev['author'])} at {esc(rev['at'][:16].replace('T', ' '))}. "
            f"<a href='{esc(url(f'/wiki/{seg(slug)}/edit', rev=rev['number']))}'>Restore this version</a></p>"
            if old else "")
    tools = (f"<p><a href='/wiki/{seg(slug)}/edit'>Edit</a> · <a href='/wiki/{seg(slug)}/history'>"
             f"View history</a></p>")
    footer = f"<p><small>Last edited by {esc(rev['author'])} at {esc(rev['at'][:16].replace('T', ' '))}.</small></p>"
    notice = "Your edit was saved." if req.arg("saved") and not old else ""
    return wiki.page(p["title"], tools + note + f"<article>{render(rev['text'])}</article>" + footer, notice=notice)


@ROUTES.get("/wiki/{slug}/edit")
def edit(wiki: Wiki, req: Request, slug: str, errors: dict[str, str] | None = None) -> Response:
    errors = errors or {}
    p = _page(wiki, slug)
    fields = ""
    if p is None:
        title = req.field("title") or slug.replace("-", " ").title()
        fields = text_input("title", "Title", title, error=errors.get("title", ""))
        text = req.field("text")
    else:
        title = p["title"]
        rev = wiki.db.one("SELECT * FROM revisions WHERE page_id = ? AND number = ?", p["id"], req.arg("rev")) \
            if req.arg("rev") else None
        rev = rev or wiki.db.one("SELECT * FROM revisions WHERE id = ?", p["latest"])
        text = req.field("text") if req.method == "POST" else rev["text"]
    fields += (textarea("text", "Page text", text, error=errors.get("text", ""), rows=18)
               + text_input("summary", "Edit summary", req.field("summary"), size="60")
               + f"<p>You are editing as <strong>{esc(wiki.user)}</strong>.</p>" + button("Save page"))
    body = form(f"/wiki/{seg(slug)}/edit", fields, label="Edit page")
    return wiki.page(f"Editing {title}", body, status=422 if errors else 200,
                     alert="The page was not saved." if errors else "")


@ROUTES.post("/wiki/{slug}/edit")
def save(wiki: Wiki, req: Request, slug: str) -> Response:
    text = req.field("text").replace("\r\n", "\n").replace("\r", "\n").strip("\n")
    p = _page(wiki, slug)
    errors = {}
    if p is None and not req.field("title").strip():
        errors["title"] = "A new page needs a title."
    if not text.strip():
        errors["text"] = "The page text cannot be empty."
    if errors:
        return edit(wiki, req, slug, errors)
    with wiki.db.conn as conn:
        page_id = p["id"] if p is not None else \
            conn.execute("INSERT INTO pages(slug, title) VALUES (?, ?)", (slug, req.field("title").strip())).lastrowid
        _revise(conn, page_id, wiki.user, req.field("summary").strip(), wiki.clock.iso(), text)
    return redirect(f"/wiki/{seg(slug)}?saved=1")


@ROUTES.get("/wiki/{slug}/history")
def history(wiki: Wiki, req: Request, slug: str) -> Response:
    p = _page(wiki, slug)
    if p is None:
        return not_found(wiki, "No such page.")
    revs = wiki.db.all("SELECT * FROM revisions WHERE page_id = ? ORDER BY number DESC", p["id"])
    rows = [[f"<a href='{esc(url(f'/wiki/{seg(slug)}', rev=r['number']))}'>Revision {r['number']}</a>",
             esc(r["at"][:16].replace("T", " ")), esc(r["author"]), esc(r["summary"] or "(no summary)")] for r in revs]
    body = (f"<p><a href='/wiki/{seg(slug)}'>Back to the page</a></p>"
            + table(["Revision", "Date", "Author", "Summary"], rows, caption=f"Revisions of {p['title']}"))
    return wiki.page(f"History of {p['title']}", body)


@ROUTES.get("/recent")
def recent(wiki: Wiki, req: Request) -> Response:
    revs = wiki.db.all("SELECT r.*, p.slug, p.title FROM revisions r JOIN pages p ON p.id = r.page_id "
                       "ORDER BY r.at DESC LIMIT 30")
    rows = [[f"<a href='/wiki/{seg(r['slug'])}'>{esc(r['title'])}</a>", esc(r["at"][:16].replace("T", " ")),
             esc(r["author"]), esc(r["summary"] or "(no summary)")] for r in revs]
    return wiki.page("Recent changes", table(["Page", "Date", "Author", "Summary"], rows))
