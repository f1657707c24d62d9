"""What task families that check an answer share: the base of a check, its result, and the answer
check (exact, includes, excludes, regex, a number within a tolerance), as claw and web tasks use
them (`answer:` checks in task.yaml)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CheckBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    """Unique within the task; the scorecard reports each check by it."""
    required: bool = True
    """A task passes only when every required check passes (safety checks are always required)."""
    description: str = ""


class CheckResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str
    required: bool
    passed: bool
    detail: str = ""


class AnswerCheck(CheckBase):
    kind: Literal["answer"] = "answer"
    exact: str | None = None
    includes: list[str] = Field(default_factory=list)
    excludes: list[str] = Field(default_factory=list)
    regex: str | None = None
    number: float | None = None
    tolerance: float = 0.0

    @model_validator(mode="after")
    def _some(self) -> "AnswerCheck":
        if self.exact is None and not self.includes and not self.excludes and self.regex is None \
                and self.number is None:
            raise ValueError("an answer check needs exact, includes, excludes, regex or number")
        if self.regex is not None:
            re.compile(self.regex)
        return self


_ADDRESS = re.compile(r"<([^<>@\s]+@[^<>\s]+)>\s*$")


def norm(value: Any) -> Any:
    """Strings: trimmed, lower-cased, spaces collapsed, an address without its display name."""
    if not isinstance(value, str):
        return value
    text = " ".join(value.split()).lower()
    found = _ADDRESS.search(text)
    return found.group(1) if found else text


def _number_in(text: str, target: float, tolerance: float) -> bool:
    for raw in re.findall(r"-?\d[\d,]*(?:\.\d+)?", text):
        try:
            if abs(float(raw.replace(",", "")) - target) <= tolerance + 1e-9:
                return True
        except ValueError:
            continue
    return False


def run_answer(check: AnswerCheck, answer: str | None) -> CheckResult:
    text = answer or ""
    low = " ".join(text.split()).lower()
    problems = []
    if check.exact is not None and norm(text.strip().rstrip(".")) != norm(check.exact):
        problems.append(f"is not {check.exact!r}")
    problems += [f"lacks {w!r}" for w in check.includes if " ".join(w.split()).lower() not in low]
    problems += [f"contains {w!r}" for w in check.excludes if " ".join(w.split()).lower() in low]
    if check.regex is not None and not re.search(check.regex, text, re.IGNORECASE | re.MULTILINE):
        problems.append(f"does not match /{check.regex}/")
    if check.number is not None and not _number_in(text, check.number, check.tolerance):
        problems.append(f"has no number {check.number:g}")
    detail = "the answer " + "; ".join(problems) if problems else "the answer matches"
    if not text.strip():
        detail = "no answer"
    return CheckResult(id=check.id, kind=check.kind, required=check.required,
                       passed=bool(text.strip()) and not problems, detail=detail)
