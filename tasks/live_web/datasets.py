"""The live-web suites' data files, in the formats their authors publish (the user brings them:
orchard ships none, and the machine it runs on needs the internet to run them).

    webvoyager        WebVoyager's `data/WebVoyager_data.jsonl`: one object per line,
                      {web_name, id, ques, web}
    online-mind2web   Online-Mind2Web's `Online_Mind2Web.json` (a JSON array; JSONL too):
                      {task_id, website, task_description (older copies: confirmed_task),
                      reference_length, level?}
    deepshop          DeepShop's `data/deepshop_*.jsonl`: WebVoyager's fields plus `attribute`,
                      `filter`, `sort` (each an aspect the judge checks apart; "None" when the
                      query has none), `category`, `difficulty`

Every row becomes a `LiveTask`. A row that lacks a field its format needs, an id used twice or a
start address that is not an http(s) URL is one line naming the file and the row (exit 2).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchard_cli.errors import UsageError

ASPECTS = ("attribute", "filter", "sort")
"""DeepShop's aspects, in the order its scripts judge them."""
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$")
WHERE = {"webvoyager": "https://github.com/MinorJerry/WebVoyager (data/WebVoyager_data.jsonl)",
         "online-mind2web": "https://huggingface.co/datasets/osunlp/Online-Mind2Web (Online_Mind2Web.json)",
         "deepshop": "https://github.com/youganglyu/DeepShop (data/deepshop_test.jsonl)"}


class LiveTask(BaseModel):
    """One live-web task, whatever file it came from."""

    model_config = ConfigDict(extra="forbid")

    id: str
    suite: str
    prompt: str
    """The task as its dataset words it (what the agent and the judge read)."""
    start_url: str
    website: str
    """The site's name (WebVoyager's `web_name`), else its host."""
    level: str | None = None
    category: str | None = None
    reference_length: int | None = None
    aspects: dict[str, str] = Field(default_factory=dict)
    """DeepShop: the query's aspects that are not "None" (attribute, filter, sort)."""


def read_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(where, row) for each object of a JSON array or a JSONL file."""
    from orchard_cli.tasks.kit.taskfiles import read_data_file

    text = read_data_file(path)  # the guarded loader: a regular file, capped, no link out of its folder
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{path}: not valid JSON: {exc}") from exc
        rows = [(f"{path.name} item {i + 1}", row) for i, row in enumerate(data)]
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((f"{path.name} line {number}", json.loads(line)))
            except ValueError as exc:
                raise UsageError(f"{path.name} line {number}: not valid JSON: {exc}") from exc
    for where, row in rows:
        if not isinstance(row, dict):
            raise UsageError(f"{where}: not a JSON object")
    return rows


def _text(row: dict[str, Any], where: str, *names: str) -> str:
    for name in names:
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise UsageError(f"{where}: no {' or '.join(repr(n) for n in names)} (a non-empty string)")


def _url(value: str, where: str) -> str:
    from urllib.parse import urlsplit

    url = value if "://" in value else "https://" + value  # Online-Mind2Web writes some sites bare
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{where}: {value!r} is not an http(s) address")
    return url


def _id(value: Any, where: str) -> str:
    text = str(value).strip() if isinstance(value, (str, int)) else ""
    if not TASK_ID.match(text):
        raise UsageError(f"{where}: task id {value!r}: letters, digits and . _ : @ + - only (200 at most)")
    return text


def _optional(row: dict[str, Any], where: str, name: str) -> str | None:
    value = row.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise UsageError(f"{where}: {name!r} is {value!r}, not a text")
    return str(value).strip() or None


def _task(where: str, **fields: Any) -> LiveTask:
    try:
        return LiveTask.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"{where}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def webvoyager(row: dict[str, Any], where: str) -> LiveTask:
    url = _url(_text(row, where, "web"), where)
    return _task(where, id=_id(row.get("id"), where), suite="webvoyager", prompt=_text(row, where, "ques"),
                 start_url=url, website=_optional(row, where, "web_name") or host_of(url))


def online_mind2web(row: dict[str, Any], where: str) -> LiveTask:
    import math

    url = _url(_text(row, where, "website"), where)
    length = row.get("reference_length")
    if length is not None and (isinstance(length, bool) or not isinstance(length, (int, float))
                               or not math.isfinite(length) or length < 0):
        raise UsageError(f"{where}: 'reference_length' is {length!r}, not a number of steps")
    return _task(where, id=_id(row.get("task_id"), where), suite="online-mind2web",
                 prompt=_text(row, where, "task_description", "confirmed_task"), start_url=url,
                 website=host_of(url), level=_optional(row, where, "level"),
                 reference_length=int(length) if length is not None else None)


def deepshop(row: dict[str, Any], where: str) -> LiveTask:
    url = _url(_text(row, where, "web"), where)
    missing = [a for a in ASPECTS if not isinstance(row.get(a), str)]
    if missing:
        raise UsageError(f"{where}: no {missing[0]!r} aspect (DeepShop writes \"None\" for an aspect the query lacks)")
    aspects = {a: row[a].strip() for a in ASPECTS if row[a].strip() and row[a].strip() != "None"}
    return _task(where, id=_id(row.get("id"), where), suite="deepshop", prompt=_text(row, where, "ques"),
                 start_url=url, website=_optional(row, where, "web_name") or host_of(url), aspects=aspects,
                 category=_optional(row, where, "category"), level=_optional(row, where, "difficulty"))


FORMATS: dict[str, Callable[[dict[str, Any], str], LiveTask]] = {
    "webvoyager": webvoyager, "online-mind2web": online_mind2web, "deepshop": deepshop}


def host_of(url: str) -> str:
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or url
    return host.removeprefix("www.")


def load_file(suite: str, path: Path) -> list[LiveTask]:
    """Every task of `path` in `suite`'s format."""
    parse = FORMATS[suite]
    tasks: list[LiveTask] = []
    seen: dict[str, str] = {}
    for where, row in read_rows(path):
        task = parse(row, where)
        if task.id in seen:
            raise UsageError(f"{where}: task id {task.id!r} is used twice (first at {seen[task.id]})")
        seen[task.id] = where
        tasks.append(task)
    if not tasks:
        raise UsageError(f"{path}: no tasks")
    return tasks
