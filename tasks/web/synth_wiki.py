"""Wiki task templates: find a fact, update a figure (the latest revision's text is checked),
a history question (who made the edit with summary S) and reverting vandalism. Each reads the
same seeded pages the wiki builds (apps/wiki_data.py)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from orchard_cli.tasks.web.apps import wiki_data
from orchard_cli.tasks.web.synth_kit import (NOW, Draw, Unfit, answer, answer_check, click, fill, goto,
                                             request_check, role, sql_text, state_check, template)

QUESTIONS = {"Population": "What is the population of {t}, according to the wiki?",
             "Height": "How high is {t} in metres, according to the wiki?",
             "Founded": "In which year was {t} founded?", "Mayor": "Who is the mayor of {t}?",
             "Twin town": "What is the twin town of {t}?", "Elevation": "What is the elevation of {t} in metres?",
             "First ascent": "In which year was {t} first climbed?", "First climbed by": "Who first climbed {t}?",
             "Range": "Which range is {t} in?", "Nearest town": "Which town is nearest to {t}?"}
NUMERIC = ("Population", "Height", "Founded", "Elevation", "First ascent")
SUMMARIES = ["Population per the 2026 census", "Updated population (2026 census)", "New census figure"]
_ROW = re.compile(r"^\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|$")


def pages(d: Draw) -> list[dict[str, Any]]:
    return wiki_data.pages(d.seed, NOW)


def facts(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in map(_ROW.match, text.splitlines()) if m}


def _number(value: str) -> float:
    return float(value.split()[0].replace(",", ""))


def _squash(sql: str) -> str:
    """SQL for a text without spaces, commas and newlines (what a check compares)."""
    return f"replace(replace(replace({sql}, ' ', ''), ',', ''), char(10), '')"


def _find(title: str) -> list[dict[str, Any]]:
    return [goto("wiki:/"), fill("#search-q", title), click(role("button", "Search")), click(role("link", title))]


@template("wiki-fact", "wiki")
def fact(d: Draw) -> dict[str, Any]:
    all_pages = pages(d)
    page = d.rng.choice(all_pages)
    latest = facts(page["revisions"][-1]["text"])
    changed = [k for k in ("Population", "Height")
               if k in latest and facts(page["revisions"][0]["text"]).get(k) != latest[k]]
    if changed:
        key = changed[0]
        wrong = facts(page["revisions"][0]["text"])[key]  # what the page said before an update
    else:
        key = d.rng.choice([k for k in latest if k in QUESTIONS])
        others = [facts(p["revisions"][-1]["text"]).get(key) for p in all_pages if p is not page]
        others = [v for v in others if v and v != latest[key] and latest[key] not in v]
        if not others:
            raise Unfit("no other page with a different value")
        wrong = d.rng.choice(others)
    value = latest[key]
    if key in NUMERIC:
        check = answer_check(number=_number(value), tolerance=0.5)
    else:  # the value, and none of the other pages' (nor the page's older) values for the same fact
        values = {facts(r["text"]).get(key) for p in all_pages for r in p["revisions"]}
        others = sorted(v for v in values if v and v != value and v.lower() not in value.lower())
        check = answer_check(includes=[value], **({"excludes": others} if others else {}))
    return {"site": "wiki", "category": "search", "difficulty": "easy",
            "prompt": QUESTIONS[key].format(t=page["title"]) + " Answer with just the value.", "start": "/",
            "fixture": d.fixture(), "checks": [check],
            "gold": [*_find(page["title"]), answer(value)], "near_miss": [*_find(page["title"]), answer(wrong)]}


@template("wiki-edit", "wiki")
def edit(d: Draw) -> dict[str, Any]:
    towns = [p for p in pages(d) if "Population" in facts(p["revisions"][-1]["text"])]
    page = d.rng.choice(towns)
    text = page["revisions"][-1]["text"]
    old = facts(text)["Population"]
    delta = d.rng.randint(2, 90) * 10
    new = int(_number(old)) + (delta if d.rng.random() < 0.5 or _number(old) < 2 * delta else -delta)
    summary = d.rng.choice(SUMMARIES)
    slug = page["slug"]

    def edited(figure: int) -> str:
        return "\n".join(f"| Population | {figure:,} |" if line.startswith("| Population |") else line
                         for line in text.splitlines())

    kept = [line for line in text.splitlines() if line.strip() and not line.startswith("| Population |")]
    rest = " AND ".join(f"instr({_squash('text')}, {sql_text(re.sub(r'[ ,]', '', line))}) > 0" for line in kept)

    def steps(figure: int) -> list[dict[str, Any]]:
        return [goto(f"wiki:/wiki/{slug}"), click(role("link", "Edit")), fill("#text", edited(figure)),
                fill("#summary", summary), click(role("button", "Save page")), answer("Updated the page.")]

    return {"site": "wiki", "category": "edit", "difficulty": "medium",
            "prompt": f"The population of {page['title']} is now {new:,}. Update the figure on its wiki page "
                      f"(change nothing else) with the edit summary \"{summary}\".",
            "start": "/", "fixture": d.fixture(),
            "checks": [
                state_check("population_updated", "wiki",
                            f"SELECT instr({_squash('text')}, '|Population|{new}|') > 0, summary FROM latest "
                            f"WHERE slug = {sql_text(slug)}", [[1, summary]]),
                state_check("rest_kept", "wiki", f"SELECT {rest} FROM latest WHERE slug = {sql_text(slug)}", [[1]]),
                request_check("saved", "wiki", f"/wiki/{slug}/edit", {"summary": summary})],
            "gold": steps(new), "near_miss": steps(new + 100)}


@template("wiki-history", "wiki")
def history(d: Draw) -> dict[str, Any]:
    candidates = [p for p in pages(d) if len(p["revisions"]) >= 3]
    if not candidates:
        raise Unfit("no page with three revisions")
    page = d.rng.choice(candidates)
    revs = page["revisions"]
    summaries = [r["summary"] for r in revs]
    unique = [k for k in range(1, len(revs)) if summaries.count(summaries[k]) == 1]
    if not unique:
        raise Unfit("no edit with a unique summary")
    k = d.rng.choice(unique)
    author, wrong = revs[k]["author"], revs[k - 1]["author"]
    steps = [goto("wiki:/"), click(role("link", page["title"])), click(role("link", "View history"))]
    return {"site": "wiki", "category": "history", "difficulty": "medium",
            "prompt": f"Who made the edit to the wiki page {page['title']} with the summary \"{revs[k]['summary']}\"? "
                      "Answer with their user name.", "start": "/", "fixture": d.fixture(),
            "checks": [answer_check(includes=[author], excludes=[r["author"] for r in revs if r["author"] != author])],
            "gold": [*steps, answer(author)], "near_miss": [*steps, answer(wrong)]}


@template("wiki-revert", "wiki")
def revert(d: Draw) -> dict[str, Any]:
    candidates = [p for p in pages(d) if len(p["revisions"]) >= 2]
    page = d.rng.choice(candidates)
    slug, title, good = page["slug"], page["title"], len(page["revisions"])
    text = page["revisions"][-1]["text"]
    vandal = "\n".join([f"{title} is the most boring place on earth!!! Nobody should ever go there."]
                       + [line for line in text.splitlines()[1:] if not line.startswith("== History")
                          and "founded in" not in line and "normal route" not in line])
    summary = "Revert vandalism"
    edit = {"slug": slug, "author": d.rng.choice(["Trollface99", "xXvandalXx", "LOLcat2026"]), "summary": "",
            "at": (NOW - timedelta(hours=d.rng.randint(1, 20))).isoformat(), "text": vandal}
    same = (f"SELECT {_squash('l.text')} = {_squash('r.text')}, l.summary FROM latest l, revisions r "
            f"JOIN pages p ON p.id = r.page_id WHERE l.slug = {sql_text(slug)} AND p.slug = {sql_text(slug)} "
            "AND r.number = {n}")

    def steps(number: int) -> list[dict[str, Any]]:
        return [goto(f"wiki:/wiki/{slug}/history"), click(role("link", f"Revision {number}")),
                click(role("link", "Restore this version")), fill("#summary", summary),
                click(role("button", "Save page")), answer("Reverted.")]

    return {"site": "wiki", "category": "edit", "difficulty": "hard",
            "prompt": f"The latest edit to the wiki page {title} was vandalism. Restore the page to the version "
                      f"just before it, with the edit summary \"{summary}\".",
            "start": "/", "fixture": d.fixture(wiki={"edits": [edit]}),
            "checks": [state_check("restored", "wiki", same.format(n=good), [[1, summary]])],
            "gold": steps(good), "near_miss": steps(1)}
