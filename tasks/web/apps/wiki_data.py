"""The wiki's seeded pages: fictional towns and mountains, each with a facts table and a history
of two to four revisions by different authors (a figure updated, a typo fixed, a section added).
Same seed, same pages (PageFixture dicts)."""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta
from typing import Any

TOWNS = ["Port Alder", "Kestrel Bay", "Millbrook", "Ravenscar", "Elmstead", "Saltmarsh", "Thornwick",
         "Halden", "Brightwater", "Oakhollow", "Westerby", "Glenmoor"]
MOUNTAINS = ["Mount Ashcombe", "Grey Tor", "Storm Peak", "The Needle", "Mount Varna", "Corrie Ban"]
REGIONS = ["Westmark", "Eastfold", "the Northern Reach", "Lowvale", "the Sound"]
RANGES = ["Ashcombe Range", "Stormfells", "Varna Hills"]
PEOPLE = ["Ada Finch", "Jonas Weir", "Mirela Osei", "Tomas Brandt", "Kaija Lund", "Odile Marsh", "Piet Aalders",
          "Sunniva Hale", "Rashid Amar", "Elin Strand"]
AUTHORS = ["MartaK", "OldHarbor", "Tomasz", "LenaW", "GeoFan", "Ravi.S", "InesB", "Quill", "Hobart", "Nadia77"]
INDUSTRIES = ["fishing", "shipbuilding", "wool", "tourism", "timber", "cheese making", "salt", "slate quarrying"]


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def render(title: str, intro: str, facts: list[tuple[str, str]], sections: list[tuple[str, str]]) -> str:
    """Page text in the wiki's markup: paragraphs, `== Heading ==`, `| key | value |` rows."""
    lines = [intro, "", "== Facts =="] + [f"| {k} | {v} |" for k, v in facts]
    for heading, text in sections:
        lines += ["", f"== {heading} ==", text]
    return "\n".join(lines)


def _town(rng: random.Random, title: str) -> tuple[str, list[tuple[str, str]], list[tuple[str, str]]]:
    region, industry = rng.choice(REGIONS), rng.choice(INDUSTRIES)
    founded = rng.randint(1120, 1890)
    facts = [("Region", region), ("Population", f"{rng.randint(800, 90000):,}"), ("Founded", str(founded)),
             ("Elevation", f"{rng.randint(2, 900)} m"), ("Mayor", rng.choice(PEOPLE)),
             ("Twin town", rng.choice([t for t in TOWNS if t != title]))]
    intro = f"{title} is a town in {region}, known for its {industry}."
    sections = [("History", f"{title} was founded in {founded} as a market for the surrounding farms. "
                            f"Its {industry} trade grew in the nineteenth century.")]
    return intro, facts, sections


def _mountain(rng: random.Random, title: str) -> tuple[str, list[tuple[str, str]], list[tuple[str, str]]]:
    rng_range, year = rng.choice(RANGES), rng.randint(1790, 1960)
    facts = [("Range", rng_range), ("Height", f"{rng.randint(900, 4200):,} m"), ("First ascent", str(year)),
             ("First climbed by", rng.choice(PEOPLE)), ("Nearest town", rng.choice(TOWNS))]
    intro = f"{title} is a mountain in the {rng_range}."
    sections = [("Climbing", f"The normal route takes about {rng.randint(4, 11)} hours from the valley.")]
    return intro, facts, sections


def _edit(rng: random.Random, facts: list[tuple[str, str]], sections: list[tuple[str, str]],
          title: str) -> tuple[str, list[tuple[str, str]], list[tuple[str, str]]]:
    """One later revision's change: a new figure, a new section or a new fact."""
    kind = rng.choice(["figure", "section", "fact"])
    facts, sections = list(facts), list(sections)
    if kind == "section" and not any(h == "Culture" for h, _ in sections):
        sections.append(("Culture", f"{title} holds a {rng.choice(['spring', 'summer', 'harvest'])} festival "
                                    f"every year, with music and a {rng.choice(['boat', 'cart', 'lantern'])} parade."))
        return "Added culture section", facts, sections
    if kind == "fact" and not any(k == "Notable landmark" for k, _ in facts):
        facts.append(("Notable landmark", rng.choice(["the old lighthouse", "a stone bridge", "the clock tower",
                                                      "a ruined abbey", "the weather station"])))
        return "Added landmark", facts, sections
    i = next(i for i, (k, _) in enumerate(facts) if k in ("Population", "Height"))
    key, value = facts[i]
    number = int(value.split()[0].replace(",", ""))
    new = number + rng.choice([-1, 1]) * rng.randint(3, 60) * (10 if number > 5000 else 1)
    facts[i] = (key, f"{new:,}" + (" m" if key == "Height" else ""))
    return f"Updated {key.lower()} figure", facts, sections


def pages(seed: int, now: datetime) -> list[dict[str, Any]]:
    rng = random.Random(f"wiki-{seed}")
    titles = rng.sample(TOWNS, 8) + rng.sample(MOUNTAINS, 4)
    out = []
    for title in sorted(titles):
        maker = _mountain if title in MOUNTAINS else _town
        intro, facts, sections = maker(rng, title)
        when = now - timedelta(days=rng.randint(200, 900), minutes=rng.randint(0, 1439))
        authors = rng.sample(AUTHORS, 4)
        revisions = [{"author": authors[0], "summary": "Created page", "at": when.isoformat(),
                      "text": render(title, intro, facts, sections)}]
        for n in range(rng.randint(1, 3)):
            summary, facts, sections = _edit(rng, facts, sections, title)
            when += timedelta(days=rng.randint(5, 120), minutes=rng.randint(0, 1439))
            revisions.append({"author": authors[n + 1], "summary": summary, "at": when.isoformat(),
                              "text": render(title, intro, facts, sections)})
        out.append({"slug": slug(title), "title": title, "revisions": revisions})
    return out
