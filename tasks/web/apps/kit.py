"""The small web kit the sites are written in: a request, a response, a router over path
patterns, and the HTML helpers (page shell, labelled fields, selects). Pages are plain
server-rendered HTML with real forms; no scripts, no external assets.
"""

from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable
from urllib.parse import quote, unquote, urlencode

CSS = """
body{font-family:system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#234;color:#fff;padding:.6em 1em;display:flex;gap:1.5em;align-items:center;flex-wrap:wrap}
header a{color:#fff}header .brand{font-weight:bold;font-size:1.2em;text-decoration:none}
main{padding:1em 1.5em;max-width:70em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
.field{margin:.5em 0}.field label{display:block;font-weight:600}
.error{color:#b00020;margin:.2em 0}.notice{background:#e7f5e7;border:1px solid #8c8;padding:.5em}
.alert{background:#fdecea;border:1px solid #e99;padding:.5em}
.cards{list-style:none;padding:0;display:grid;grid-template-columns:repeat(auto-fill,minmax(14em,1fr));gap:.8em}
.cards li{background:#fff;border:1px solid #ddd;padding:.6em}
aside{float:left;width:14em;margin-right:1.5em}.results{overflow:hidden}
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def url(path: str, **params: Any) -> str:
    """`path` with the non-empty params as a query string."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return path + ("?" + urlencode(kept) if kept else "")


def seg(value: str) -> str:
    """One path segment, quoted."""
    return quote(value, safe="")


class Clock:
    """The sites' clock: the fixture's `now`, running on from the reset."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self._t0 = time.monotonic()

    def now(self) -> datetime:
        return self.start + timedelta(seconds=int(time.monotonic() - self._t0))

    def iso(self) -> str:
        return self.now().isoformat()


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    form: dict[str, list[str]] = field(default_factory=dict)

    def arg(self, name: str, default: str = "") -> str:
        return self.query.get(name, [default])[0]

    def field(self, name: str, default: str = "") -> str:
        return self.form.get(name, [default])[0]


@dataclass
class Response:
    status: int = 200
    body: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "text/html; charset=utf-8"


def redirect(location: str, status: int = 303) -> Response:
    return Response(status=status, headers=[("Location", location)], body="")


Handler = Callable[..., Response]


class Router:
    """Routes `(method, "/product/{pid}")` -> a function `(site, request, **params) -> Response`."""

    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []

    def _add(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        regex = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$")

        def register(fn: Handler) -> Handler:
            self._routes.append((method, regex, fn))
            return fn
        return register

    def get(self, pattern: str) -> Callable[[Handler], Handler]:
        return self._add("GET", pattern)

    def post(self, pattern: str) -> Callable[[Handler], Handler]:
        return self._add("POST", pattern)

    def dispatch(self, site: Any, request: Request) -> Response:
        allowed = []
        for method, regex, fn in self._routes:
            match = regex.match(request.path)
            if not match:
                continue
            if method != request.method:
                allowed.append(method)
                continue
            return fn(site, request, **{k: unquote(v) for k, v in match.groupdict().items()})
        if allowed:
            return Response(405, page(site.title, "Method not allowed", "<p>This page does not accept "
                                      f"{esc(request.method)}.</p>", site.nav()),
                            headers=[("Allow", ", ".join(sorted(set(allowed))))])
        return not_found(site)


def not_found(site: Any, what: str = "This page does not exist.") -> Response:
    return Response(404, page(site.title, "Not found", f"<p>{esc(what)}</p><p><a href='/'>Home</a></p>", site.nav()))


def page(site_title: str, title: str, body: str, nav: Iterable[tuple[str, str]] = (),
         notice: str = "", alert: str = "") -> str:
    """A whole HTML page: a header (the site's name, its links), an optional notice, the body."""
    links = "".join(f"<a href='{esc(href)}'>{esc(label)}</a>" for href, label in nav)
    flash = (f"<p class='notice' role='status'>{esc(notice)}</p>" if notice else "") + \
            (f"<div class='alert' role='alert'>{esc(alert)}</div>" if alert else "")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{esc(title)} - {esc(site_title)}</title><style>{CSS}</style></head><body>"
            f"<header><a class='brand' href='/'>{esc(site_title)}</a><nav aria-label='Main'>{links}</nav></header>"
            f"<main><h1>{esc(title)}</h1>{flash}{body}</main></body></html>")


def text_input(name: str, label: str, value: Any = "", *, kind: str = "text", error: str = "",
               ident: str | None = None, **attrs: Any) -> str:
    """A labelled <input> (id = `ident` or the name) with its error below, tied by aria-describedby."""
    ident = ident or name
    extra = "".join(f" {k.rstrip('_').replace('_', '-')}='{esc(v)}'" if v is not True else f" {k}"
                    for k, v in attrs.items() if v not in (None, False))
    described = f" aria-invalid='true' aria-describedby='{ident}-error'" if error else ""
    control = f"<input type='{kind}' id='{ident}' name='{esc(name)}' value='{esc(value)}'{extra}{described}>"
    return _field(ident, label, control, error)


def textarea(name: str, label: str, value: str = "", *, error: str = "", rows: int = 8,
             ident: str | None = None) -> str:
    ident = ident or name
    described = f" aria-invalid='true' aria-describedby='{ident}-error'" if error else ""
    control = f"<textarea id='{ident}' name='{esc(name)}' rows='{rows}' cols='70'{described}>{esc(value)}</textarea>"
    return _field(ident, label, control, error)


def select(name: str, label: str, options: Iterable[tuple[str, str]], chosen: str = "", *,
           error: str = "", ident: str | None = None, disabled: Iterable[str] = ()) -> str:
    """A labelled <select> of (value, text) options."""
    ident = ident or name
    off = set(disabled)
    opts = "".join(f"<option value='{esc(v)}'{' selected' if v == chosen else ''}"
                   f"{' disabled' if v in off else ''}>{esc(t)}</option>" for v, t in options)
    described = f" aria-invalid='true' aria-describedby='{ident}-error'" if error else ""
    return _field(ident, label, f"<select id='{ident}' name='{esc(name)}'{described}>{opts}</select>", error)


def _field(ident: str, label: str, control: str, error: str) -> str:
    note = f"<p class='error' id='{ident}-error'>{esc(error)}</p>" if error else ""
    return f"<div class='field'><label for='{ident}'>{esc(label)}</label>{control}{note}</div>"


def hidden(name: str, value: Any) -> str:
    return f"<input type='hidden' name='{esc(name)}' value='{esc(value)}'>"


def button(text: str, name: str = "", value: str = "", *, label: str = "") -> str:
    """A submit button; `label` is its accessible name when the text alone is ambiguous."""
    named = f" name='{esc(name)}' value='{esc(value)}'" if name else ""
    aria = f" aria-label='{esc(label)}'" if label else ""
    return f"<button type='submit'{named}{aria}>{esc(text)}</button>"


def form(action: str, inner: str, *, method: str = "post", label: str = "", role: str = "") -> str:
    aria = f" aria-label='{esc(label)}'" if label else ""
    rolled = f" role='{role}'" if role else ""
    return f"<form method='{method}' action='{esc(action)}'{aria}{rolled}>{inner}</form>"


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], caption: str = "") -> str:
    """A table; the cells are HTML already (escape text with `esc`)."""
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    head = "".join(f"<th scope='col'>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def search_form(action: str, query: str, label: str) -> str:
    return form(action, text_input("q", label, query, kind="search", ident="search-q") + button("Search"),
                method="get", role="search", label=label)
