"""Candidate patches for a task that has a gold patch: the gold patch, near misses of it, an
unrelated edit and the empty patch. Graded by `orchard eval --predictions`, they are real graded
experience for a value model before any agent has run (and the benchmark's candidate sets).

- near_miss: the fixed code (base + gold) with one more AST mutation (tasks/synth/mutate.py) on
  or near the lines the gold patch changed: a perturbed constant, a reversed comparison or
  boolean, an off-by-one, swapped arguments, a dropped branch, a value returned (never a dropped
  statement, never inside a `while` loop: a hang costs the grader's whole timeout). The diff is
  taken from the base, so it "fixes" the same spot, differently.
- partial: the gold patch without its last hunk (gold patches of two hunks or more).
- unrelated: one mutation elsewhere in a file the gold patch touches (another function), the
  bug left as it is.
- empty: no patch.

Every candidate, the gold patch included, is written by the same `git diff` (git_diff), so the
way a diff is written never tells the gold patch apart. Whether a candidate resolves the task is
never assumed: the grader decides (a near miss the tests do not catch is resolved, and is
labelled so).
"""

from __future__ import annotations

import ast
import os
import random
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchard_cli.errors import InfraError, UsageError

KINDS = ("gold", "near_miss", "partial", "unrelated", "empty")
DIFF_FLAGS = ("diff", "--no-color", "--no-ext-diff", "--full-index", "--no-renames", "--diff-algorithm=myers",
              "--src-prefix=a/", "--dst-prefix=b/", "-U3")
# A dropped statement is often what moves a loop or an iterator on (`self.pos = m.end()`): the
# tests then hang until the grader's timeout (30 minutes). Candidates never use it, nor any edit
# inside a `while` loop (loop_lines).
HANG_PRONE = frozenset({"drop_statement"})
NEAR_LINES = 4  # a near miss edits the fixed code at most this many lines from a changed line
FAR_LINES = 8  # an unrelated edit is further than this from every changed line
_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Candidate:
    kind: str
    patch: str


def _git(repo: Path, *args: str, stdin: str | None = None, index: str | None = None) -> str:
    """git's output as text; bytes that are not UTF-8 survive the round trip (surrogateescape),
    and line endings are left as they are."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"})
    if index:
        env["GIT_INDEX_FILE"] = index
    data = stdin.encode("utf-8", "surrogateescape") if stdin is not None else None
    done = subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True, env=env, timeout=120)
    if done.returncode != 0:
        error = (done.stderr or done.stdout).decode(errors="replace").strip()[:300]
        raise InfraError(f"git {args[0]} failed in {repo}: {error}")
    return done.stdout.decode("utf-8", "surrogateescape")


def git_diff(repo: Path, base: str, texts: dict[str, str]) -> str:
    """The diff from commit `base` to `base` with `texts` written over its files, as git writes
    it (full index lines, function context in hunk headers). Every candidate is rendered here,
    the gold patch included, so no candidate can be told apart by the way its diff is written.
    The blobs go into the repository's object store; its work tree and index are not touched."""
    with tempfile.TemporaryDirectory(prefix="orchard-variants-") as tmp:
        index = str(Path(tmp) / "index")
        _git(repo, "read-tree", base, index=index)
        for path, text in texts.items():
            listed = _git(repo, "ls-tree", base, "--", path).split()
            mode = listed[0] if listed else "100644"
            blob = _git(repo, "hash-object", "-w", "--stdin", stdin=text).strip()
            _git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}", index=index)
        tree = _git(repo, "write-tree", index=index).strip()
    return _git(repo, *DIFF_FLAGS, base, tree)


def changed_lines(patch: str) -> dict[str, set[int]]:
    """Per file, the new-side line numbers the patch adds (or, for a removal, where it removes)."""
    out: dict[str, set[int]] = {}
    path = None
    new_line = 0
    for line in patch.splitlines():
        file_match = _FILE.match(line)
        if file_match:
            path = file_match.group(2)
            out.setdefault(path, set())
            continue
        hunk = _HUNK.match(line)
        if hunk:
            new_line = int(hunk.group(3))
            continue
        if path is None or line.startswith(("--- ", "+++ ", "index ")) or not new_line:
            continue
        if line.startswith("+"):
            out[path].add(new_line)
            new_line += 1
        elif line.startswith("-"):
            out[path].add(new_line)
        elif not line.startswith("\\"):
            new_line += 1
    return out


def split_hunks(patch: str) -> list[tuple[str, list[str]]]:
    """[(file header, [hunk text, ...]), ...] of a git diff."""
    files: list[tuple[str, list[str]]] = []
    for chunk in re.split(r"(?m)^(?=diff --git )", patch):
        if not chunk.strip():
            continue
        parts = re.split(r"(?m)^(?=@@ )", chunk)
        files.append((parts[0], parts[1:]))
    return files


def _texts(repo: Path, base: str, gold: str, paths: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The files at the base commit and with the gold patch applied (in a private index: the
    repository's work tree and index are not touched)."""
    before = {p: _git(repo, "show", f"{base}:{p}") for p in paths}
    with tempfile.TemporaryDirectory(prefix="orchard-variants-") as tmp:
        index = str(Path(tmp) / "index")
        _git(repo, "read-tree", base, index=index)
        _git(repo, "apply", "--cached", "--whitespace=nowarn", "-", stdin=gold, index=index)
        after = {p: _git(repo, "show", f":{p}", index=index) for p in paths}
    return before, after


def _mutations(path: str, text: str, want: Callable[[Any], bool]) -> list[Any]:
    """The synth mutator's mutations of `text` that `want` accepts, not yet checked to parse
    (find_mutations checks every one of a module's hundreds: a minute for a large file)."""
    from orchard_cli.tasks.synth import mutate

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    finder = mutate._Finder(path, mutate._Text(text))
    finder.visit(tree)
    seen: set[tuple[int, int, str]] = set()
    out = []
    for m in sorted(finder.found, key=lambda m: (m.start, m.end, m.kind, m.replacement)):
        key = (m.start, m.end, m.replacement)
        if key not in seen and m.kind not in HANG_PRONE and want(m):
            seen.add(key)
            out.append(m)
    return out


def loop_lines(text: str) -> set[int]:
    """Lines inside `while` loops: an edit there can make the tests hang (a dropped increment, a
    flipped condition), and a hung candidate costs the grader's whole timeout."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    return {n for node in ast.walk(tree) if isinstance(node, ast.While)
            for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}


def _changes_ast(text: str, mutated: str) -> bool:
    try:
        return ast.dump(ast.parse(mutated)) != ast.dump(ast.parse(text))
    except (SyntaxError, ValueError):
        return False


def _pick(rng: random.Random, items: list[tuple[str, Any]], n: int,
          ok: Callable[[str, Any], bool]) -> list[tuple[str, Any]]:
    """Up to n (path, mutation) items that pass `ok`, different mutation kinds first, seeded."""
    items = sorted(items, key=lambda item: (item[0], item[1].start, item[1].id))
    rng.shuffle(items)
    first, rest, kinds = [], [], set()
    for item in items:
        (rest if item[1].kind in kinds else first).append(item)
        kinds.add(item[1].kind)
    chosen: list[tuple[str, Any]] = []
    for item in first + rest:
        if len(chosen) >= n:
            break
        if ok(*item):
            chosen.append(item)
    return chosen


def candidates(task: Any, family: Any, *, seed: int = 0, near_misses: int = 2) -> list[Candidate]:
    """The candidate patches of one task (gold first; `kind` says what each is)."""
    from orchard_cli.rollout.choose import reference as reference_of

    reference = reference_of(family, task, None, "gold")
    gold = (reference.patch or "") if reference is not None else ""
    if not gold.strip():
        raise UsageError(f"{task.task_id} has no gold patch: candidates are made from one")
    repo = Path(family.repository(task))
    base = task.record["base_commit"]
    lines = changed_lines(gold)
    paths = sorted(lines)
    before, after = _texts(repo, base, gold, paths)
    rng = random.Random(f"candidates:{seed}:{task.task_id}")

    def patch_with(path: str, text: str, keep_gold: bool = True) -> str:
        return git_diff(repo, base, {p: text if p == path else (after[p] if keep_gold else before[p])
                                     for p in paths})

    gold = git_diff(repo, base, after)  # the gold patch, written like every other candidate
    out = [Candidate("gold", gold)]

    near: list[list[tuple[str, Any]]] = [[], []]  # on or next to a changed line; a few lines off
    far: list[tuple[str, Any]] = []
    for path in paths:
        if path.endswith(".py"):
            spots = lines[path]
            gap = lambda m: min(abs(m.line - s) for s in spots)  # noqa: E731
            loops_after, loops_before = loop_lines(after[path]), loop_lines(before[path])
            for m in _mutations(path, after[path], lambda m: gap(m) <= NEAR_LINES and m.line not in loops_after):
                near[gap(m) > 1].append((path, m))
            far += [(path, m) for m in _mutations(path, before[path],
                                                  lambda m: gap(m) > FAR_LINES and m.line not in loops_before)]
    seen = {gold}

    def near_ok(path: str, m: Any) -> bool:  # parses, changes the code, does not just undo the fix
        mutated = m.apply(after[path])
        return mutated != before[path] and _changes_ast(after[path], mutated)

    picked = _pick(rng, near[0], near_misses, near_ok)
    picked += _pick(rng, near[1], near_misses - len(picked), near_ok)
    for path, m in picked:
        patch = patch_with(path, m.apply(after[path]))
        if patch.strip() and patch not in seen:
            seen.add(patch)
            out.append(Candidate("near_miss", patch))
    hunked = split_hunks(gold)
    if sum(len(h) for _, h in hunked) >= 2:
        last = max(i for i, (_, h) in enumerate(hunked) if h)
        partial = "".join(head + "".join(h[:-1] if i == last else h) for i, (head, h) in enumerate(hunked)
                          if not (i == last and len(h) == 1))
        if partial.strip() and partial not in seen:
            seen.add(partial)
            out.append(Candidate("partial", partial))
    for path, m in _pick(rng, far, 1, lambda path, m: _changes_ast(before[path], m.apply(before[path]))):
        patch = patch_with(path, m.apply(before[path]), keep_gold=False)
        if patch.strip() and patch not in seen:
            out.append(Candidate("unrelated", patch))
    out.append(Candidate("empty", ""))
    return out
