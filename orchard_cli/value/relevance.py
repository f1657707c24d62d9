"""Does the patch touch what the problem talks about? Two lexical features for the value model.

A problem statement names the behaviour that is wrong: failing tests (`test_camelize_with_lower`),
functions, error messages. A patch that edits the function the problem names is more likely to
be a fix than one that edits another part of the file (an unrelated edit leaves the bug where it
is). Read without a model, from the text alone:

- scope_mentioned: the share of the patch's hunks whose enclosing function or class (git's hunk
  header, or a `def`/`class` line inside the hunk) is named in the problem statement;
- identifiers_mentioned: the share of the identifiers on the changed lines that occur in it.

Both are 0 for a patch without hunks, and both read the problem in lower case, so that
`camelize` matches `test_camelize_with_lower`.
"""

from __future__ import annotations

import re

NAMES = ("scope_mentioned", "identifiers_mentioned")
_HEADER = re.compile(r"^@@ [^@]*@@\s*(?:async\s+)?(?:def|class)\s+(\w+)")
_DEFINITION = re.compile(r"^[ +-]\s*(?:async\s+)?(?:def|class)\s+(\w+)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_KEYWORDS = frozenset({"and", "not", "for", "def", "class", "return", "self", "none", "true", "false",
                       "else", "elif", "while", "with", "import", "from", "try", "except", "finally",
                       "raise", "pass", "lambda", "yield", "async", "await", "global", "nonlocal", "cls"})


def _hunk_scopes(patch: str) -> list[set[str]]:
    """The names each hunk sits in: its header's function or class and the ones it defines."""
    scopes: list[set[str]] = []
    for line in patch.splitlines():
        if line.startswith("@@"):
            header = _HEADER.match(line)
            scopes.append({header.group(1).lower()} if header else set())
        elif scopes and not line.startswith(("+++", "---")):
            found = _DEFINITION.match(line)
            if found:
                scopes[-1].add(found.group(1).lower())
    return scopes


def _changed_identifiers(patch: str) -> set[str]:
    words: set[str] = set()
    for line in patch.splitlines():
        if line[:1] in "+-" and not line.startswith(("+++", "---")):
            words |= {w.lower() for w in _WORD.findall(line[1:])} - _KEYWORDS
    return words


def relevance(problem: str, patch: str) -> list[float]:
    """[scope_mentioned, identifiers_mentioned] for one episode."""
    text = problem.lower()
    scopes = _hunk_scopes(patch)
    scope = sum(1.0 for names in scopes if any(n in text for n in names)) / len(scopes) if scopes else 0.0
    words = _changed_identifiers(patch)
    ident = sum(1.0 for w in words if w in text) / len(words) if words else 0.0
    return [scope, ident]
