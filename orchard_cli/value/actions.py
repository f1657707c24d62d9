"""What an episode without a patch did: its tool calls, final answer, state changes and files.

Families graded on service state and answers (claw: mail, calendar, todos, contacts, files)
leave evidence without a patch. The value model reads such an episode's `Actions` where it
would read a patch (data.sections), rendered as text:

    calls:
      list_events({"start":"2026-12-01T00:00:00+01:00",...}) -> 200
      create_event({"summary":"Vendor onboarding",...}) -> 200
    answer: Booked vendor onboarding with Erin Kowalski on Tuesday at 15:00.
    state changes:
      + calendar.events[d4dcded8bd3c4b0b] {"summary":"Vendor onboarding",...}
      ~ mail.mailboxes.INBOX[m8].unread: true -> false
    files:
      report.md (62 chars): "# Expenses\n- office: 557.84\n..."

and a few numbers from it (FEATURES: how many calls, the share that failed, the share that repeat
an earlier call exactly (an agent going round in circles), whether and how much the state
changed, how long the answer is), the same for any family: only the `Evidence` fields
are read (dispatches, answer, state_before -> state, files), and the state diff walks any JSON
(lists of objects with an `id` or `uid` are matched by it).

An episode is read this way when its evidence has no patch (`patch` is None: families graded on
a patch always set it, '' included) and holds something else. Everything else reads as before.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

FEATURES = ("log_dispatches", "failed_dispatch_share", "repeated_dispatch_share", "state_changed",
            "log_state_changes", "log_answer_chars")
ID_KEYS = ("id", "uid")
MAX_ARGUMENTS = 300  # characters of one call's JSON arguments shown
MAX_CHANGE = 240  # characters of one state-change line
MAX_CHANGES = 40  # state-change lines shown (all are counted)
MAX_ANSWER = 1500
FILE_HEAD = 200  # characters of each workspace file shown


class Call(BaseModel):
    """One tool call, as the value model reads it (its result is left out)."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    status: int | None = None

    @property
    def failed(self) -> bool:
        """A reply outside 2xx (a bad argument, a missing item, a dead service) or none at all."""
        return self.status is None or not 200 <= self.status < 300


class Actions(BaseModel):
    """An episode's actions, compact: what `render` shows and `features` counts."""

    model_config = ConfigDict(extra="forbid")

    calls: list[Call] = Field(default_factory=list)
    answer: str = ""
    changes: list[str] | None = Field(default_factory=list)
    """State-change lines (`state_changes`); None when no snapshot from before the attempt was kept."""
    files: dict[str, str] = Field(default_factory=dict)
    """Workspace files after the episode: path -> head (FILE_HEAD characters)."""
    file_sizes: dict[str, int] = Field(default_factory=dict)


def actions_of(evidence: Any) -> Actions | None:
    """The actions of an episode's evidence (an `Evidence` or its JSON), or None when it has a
    patch (read as a patch, as before) or nothing at all."""
    if evidence is None:
        return None
    if not isinstance(evidence, dict):
        evidence = evidence.model_dump(mode="json")
    if evidence.get("patch") is not None:
        return None
    dispatches = evidence.get("dispatches") or []
    state, before = evidence.get("state") or {}, evidence.get("state_before") or {}
    files = evidence.get("files") or {}
    answer = evidence.get("answer") or ""
    if not (dispatches or state or before or files or answer.strip()):
        return None
    calls = [Call(tool=str(d.get("tool", "?")),
                  arguments=d.get("arguments") if isinstance(d.get("arguments"), dict) else {},
                  status=d.get("status")) for d in dispatches]
    return Actions(calls=calls, answer=answer, changes=state_changes(before, state) if before else None,
                   files={p: t[:FILE_HEAD] for p, t in sorted(files.items())},
                   file_sizes={p: len(t) for p, t in sorted(files.items())})


# ---- the state diff -----------------------------------------------------------------------------

def compact(value: Any, limit: int = MAX_CHANGE) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _key(item: Any) -> str | None:
    if isinstance(item, dict):
        for name in ID_KEYS:
            if isinstance(item.get(name), (str, int)):
                return str(item[name])
    return None


def state_changes(before: Any, after: Any, path: str = "") -> list[str]:
    """What changed from `before` to `after`, one line per change: `+ path value` (added),
    `- path` (removed), `~ path: old -> new` (changed). Objects are walked key by key; lists of
    objects that carry an id are matched by it, other lists as multisets."""
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in [*before, *(k for k in after if k not in before)]:
            where = f"{path}.{key}" if path else str(key)
            if key not in after:
                out.append(f"- {where}")
            elif key not in before:
                out.append(f"+ {where} {compact(after[key])}")
            else:
                out += state_changes(before[key], after[key], where)
        return out
    if isinstance(before, list) and isinstance(after, list):
        old_keys, new_keys = [_key(i) for i in before], [_key(i) for i in after]
        if None not in old_keys + new_keys:  # every item carries an id: match them by it
            old, new = dict(zip(old_keys, before)), dict(zip(new_keys, after))
            out = [f"- {path}[{k}]" for k in old if k not in new]
            for k, item in new.items():
                if k not in old:
                    rest = {n: v for n, v in item.items() if n not in ID_KEYS}
                    out.append(f"+ {path}[{k}] {compact(rest)}")
                else:
                    out += state_changes(old[k], item, f"{path}[{k}]")
            return out
        left = [compact(i, 10**9) for i in before]
        right = [compact(i, 10**9) for i in after]
        out = []
        pool = list(right)
        for text in left:
            if text in pool:
                pool.remove(text)
            else:
                out.append(f"- {path}[] {text}")
        pool = list(left)
        for text in right:
            if text in pool:
                pool.remove(text)
            else:
                out.append(f"+ {path}[] {text}")
        return [line if len(line) <= MAX_CHANGE else line[:MAX_CHANGE - 3] + "..." for line in out]
    return [f"~ {path}: {compact(before, MAX_CHANGE // 2)} -> {compact(after, MAX_CHANGE // 2)}"]


# ---- as text, as numbers ------------------------------------------------------------------------

def render(actions: Actions) -> str:
    """The Actions section's text (without its title)."""
    lines = ["calls:" if actions.calls else "calls: (none)"]
    for call in actions.calls:
        lines.append(f"  {call.tool}({compact(call.arguments, MAX_ARGUMENTS)}) -> {call.status}")
    answer = actions.answer.strip()
    if len(answer) > MAX_ANSWER:
        answer = answer[:MAX_ANSWER] + "..."
    lines.append(f"answer: {answer}" if answer else "answer: (none)")
    if actions.changes is None:
        lines.append("state changes: (no snapshot from before the attempt)")
    elif not actions.changes:
        lines.append("state changes: (none)")
    else:
        lines.append("state changes:")
        lines += [f"  {line}" for line in actions.changes[:MAX_CHANGES]]
        if len(actions.changes) > MAX_CHANGES:
            lines.append(f"  ... {len(actions.changes) - MAX_CHANGES} more")
    if actions.files:
        lines.append("files:")
        for path, head in actions.files.items():
            size = actions.file_sizes.get(path, len(head))
            shown = json.dumps(head + ("..." if size > len(head) else ""), ensure_ascii=False)
            lines.append(f"  {path} ({size} chars): {shown}")
    return "\n".join(lines)


def features(actions: Actions | None) -> list[float]:
    """FEATURES of one episode (all 0 for an episode read as a patch)."""
    if actions is None:
        return [0.0] * len(FEATURES)
    n = len(actions.calls)
    failed = sum(1 for c in actions.calls if c.failed)
    seen: set[str] = set()
    repeated = 0
    for call in actions.calls:
        key = f"{call.tool}\x1f{compact(call.arguments, 10**9)}"
        repeated += key in seen
        seen.add(key)
    changes = len(actions.changes or [])
    return [math.log1p(n), failed / n if n else 0.0, repeated / n if n else 0.0, float(changes > 0),
            math.log1p(changes), math.log1p(len(actions.answer.strip()))]
