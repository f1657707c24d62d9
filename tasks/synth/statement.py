"""Problem statements for synthesized tasks, written like a user's report.

Built only from what a user would see: the names of the failing tests and their errors (the
test's own failing line and pytest's `E` lines). Never from the diff, never from library frames
of the traceback (those would show the mutated line). A `--writer-model` on any OpenAI-compatible
endpoint can rewrite it; it gets the same facts, nothing more.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

MAX_TESTS_SHOWN = 3
MAX_ERROR_LINES = 8
WRITER_TIMEOUT = 120.0

_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$", re.M)
# What differs from run to run in pytest's output: object addresses, its numbered temp folders.
_VOLATILE = ((re.compile(r" at 0x[0-9a-fA-F]+>"), ">"), (re.compile(r"/pytest-\d+/"), "/pytest-N/"))
_HINT = re.compile(r"Use -v to get|use '-vv' to show|Full output truncated")


@dataclass
class Failure:
    test: str
    excerpt: str
    """The test's failing line and the error lines, as pytest printed them."""


def _section_name(test_id: str) -> str:
    """The header pytest gives a test's failure section: 'Class.test_x[param]'."""
    parts = test_id.split("::")[1:]
    return ".".join(parts)


def failures(log: str, tests: list[str]) -> list[Failure]:
    """The failure excerpt of each of `tests` from a `pytest -rA` log."""
    from orchard_cli.tasks.swe.grading import ANSI

    log = ANSI.sub("", log)
    sections: dict[str, str] = {}
    matches = list(_SECTION.finditer(log))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(log)
        body = log[match.end():end]
        body = re.split(r"^(=+ .* =+|-+ Captured .* -+)$", body, maxsplit=1, flags=re.M)[0]
        sections.setdefault(match.group(1).strip(), body)
    out = []
    for test in tests:
        body = sections.get(_section_name(test), "")
        out.append(Failure(test, _excerpt(body, test)))
    return out


def _excerpt(body: str, test: str) -> str:
    """The first `>` line (the test's own failing line) and the last block of `E` lines."""
    lines = body.splitlines()
    first = next((l.rstrip() for l in lines if l.startswith(">")), "")
    errors: list[str] = []
    block: list[str] = []
    for line in lines:
        if _HINT.search(line):
            continue
        if line.startswith("E "):
            block.append(line.rstrip())
        elif block:
            errors, block = block, []
    errors = block or errors
    if len(errors) > MAX_ERROR_LINES:
        errors = errors[:MAX_ERROR_LINES] + ["E       ..."]
    shown = ([first] if first else []) + errors
    for pattern, replacement in _VOLATILE:
        shown = [pattern.sub(replacement, line) for line in shown]
    if not shown:
        status = "errored" if "ERROR" in body else "failed"
        return f"({test} {status}; pytest printed no assertion for it)"
    return "\n".join(shown)


def _subject(test: str) -> str:
    """'tests/test_itertoolz.py::test_partition_all' -> 'partition all'."""
    name = re.sub(r"\[.*$", "", test.split("::")[-1])
    words = re.sub(r"^test_?", "", name).replace("_", " ").strip()
    return words or name


_OPENINGS = (
    "After installing {pkg} {version} from source, some of its own tests fail for me:",
    "I ran the test suite of {pkg} {version} on this checkout and these tests fail:",
    "Something in {pkg} {version} seems broken: its test suite reports these failures:",
)


def template(package: str, version: str, failed: list[Failure], key: str) -> str:
    """A deterministic, user-style report (the variant picked by `key`)."""
    pick = int(hashlib.sha256(key.encode()).hexdigest(), 16)
    subject = _subject(failed[0].test) if failed else "tests"
    title = f"{package}: {subject} gives wrong results" if pick % 2 else f"{package}: {subject} is broken"
    lines = [title, "", _OPENINGS[pick % len(_OPENINGS)].format(pkg=package, version=version), ""]
    lines += [f"- `{f.test}`" for f in failed]
    for failure in failed[:MAX_TESTS_SHOWN]:
        lines += ["", f"`{failure.test}`:", "", "```", failure.excerpt, "```"]
    if len(failed) > MAX_TESTS_SHOWN:
        lines += ["", f"({len(failed) - MAX_TESTS_SHOWN} more fail the same way.)"]
    lines += ["", "These tests should pass, and the rest of the test suite should keep passing."]
    return "\n".join(lines) + "\n"


WRITER_PROMPT = """You write GitHub issues. A user of the Python package {pkg} {version} found \
that some of its tests fail. Write the issue they would file: a one-line title, then a short \
description of the wrong behaviour, using the test names and errors below. Do not guess at \
the cause or the fix and do not name source lines; quote the errors that matter. Plain \
Markdown, no preamble.

{facts}"""


def write_with_model(package: str, version: str, failed: list[Failure], *, model: str,
                     base_url: str, api_key: str | None = None) -> str:
    """The same facts rewritten by a chat model behind an OpenAI-compatible endpoint."""
    import httpx

    facts = "\n\n".join(f"Failing test: {f.test}\n{f.excerpt}" for f in failed[:MAX_TESTS_SHOWN])
    key = api_key or os.environ.get("ORCHARD_WRITER_API_KEY") or os.environ.get("OPENAI_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": model, "temperature": 0, "max_tokens": 700,
            "messages": [{"role": "user", "content": WRITER_PROMPT.format(
                pkg=package, version=version, facts=facts)}]}
    response = httpx.post(base_url.rstrip("/") + "/chat/completions", json=body, headers=headers,
                          timeout=WRITER_TIMEOUT)
    response.raise_for_status()
    text = response.json()["choices"][0]["message"]["content"] or ""
    if not text.strip():
        raise ValueError("the writer model answered with no text")
    names = "\n".join(f"- `{f.test}`" for f in failed)
    return text.strip() + f"\n\nFailing tests:\n{names}\n"
