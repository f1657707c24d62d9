"""The commands of README.md and docs/*.md: fenced shell blocks, their marks, and each `orchard`
command in them (also the inline `orchard ...` code spans of the prose).

A block is marked by an HTML comment on the line before its fence:

    <!-- docs: fast -->          the docs test runs it in CI (seconds, no endpoint)
    <!-- docs: run -->           scripts/check-docs.sh runs it (minutes; no endpoint)
    <!-- docs: endpoint -->      needs a real model endpoint, a judge, or data not shipped here
                                 (M, U, https://host/v1 ...): parsed, never run
    <!-- docs: skip REASON -->   parsed, never run (a long install, a cluster, a service kept up)

Unmarked blocks are parsed and, by scripts/check-docs.sh, run when they hold no placeholder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"<!--\s*docs:\s*(\w[\w-]*)\s*(.*?)\s*-->")
SHELLS = ("bash", "sh", "shell", "console", "")
ORCHARD = re.compile(r"(?:^|\s|&&|;|\$\(|`)((?:\S*/)?orchard)\s")


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    text: str
    mark: str = ""
    reason: str = ""
    commands: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def logical_lines(text: str) -> list[str]:
    """Lines with their backslash continuations joined."""
    out, current = [], ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        out.append(current + raw)
        current = ""
    if current:
        out.append(current)
    return out


def orchard_commands(line: str) -> list[str]:
    """Each `orchard ...` command of a shell line (a line may chain several with && or ;)."""
    found = []
    for part in re.split(r"&&|;|\|\|", line):
        part = part.strip()
        if part.startswith("$ "):
            part = part[2:]
        words = part.split()
        for i, word in enumerate(words):
            bare = word.lstrip('"\'$(')
            if bare == "orchard" or bare.endswith("/orchard"):
                found.append(" ".join(["orchard", *words[i + 1:]]).rstrip(')"\''))
                break
            if word == "orchard_cli.main" and i and words[i - 1] == "-m":  # torchrun -m orchard_cli.main ...
                found.append(" ".join(["orchard", *words[i + 1:]]))
                break
            if word.startswith("#"):
                break
    return found


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        lang, start = match.group(1), i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        mark = MARK.search(lines[start - 1]) if start else None
        block = Block(path=path, line=start + 1, lang=lang, text="\n".join(lines[start + 1:end]),
                      mark=mark.group(1) if mark else "", reason=mark.group(2) if mark else "")
        if lang in SHELLS:
            block.commands = [c for line in logical_lines(block.text) for c in orchard_commands(line)]
        out.append(block)
        i = end + 1
    return out


def inline_commands(path: Path) -> list[tuple[int, str]]:
    """`orchard ...` code spans in prose (outside fences), with their line numbers."""
    out, inside = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            inside = not inside
            continue
        if inside:
            continue
        for span in re.findall(r"`([^`]+)`", line):
            if span.startswith("orchard ") and not re.search(r"\.\.\.|…|\[|\||<|\{", span):
                out.append((number, span))
    return out


def all_blocks() -> list[Block]:
    return [b for path in doc_files() for b in blocks(path)]
