"""The judge's verdict and screenshot scores are read from its reply, never guessed."""

from __future__ import annotations

import pytest

from orchard_cli.webjudge.methods import last_line_verdict, read_score

VOYAGER = ("SUCCESS", r"NOT\s+SUCCESS")
JUDGE = (r"status\s*:\s*success", r"status\s*:\s*failure")


@pytest.mark.parametrize("reply, expected", [
    ("The cart holds the mug.\nSUCCESS", True),
    ("The form is empty.\nNOT SUCCESS", False),
    ("**NOT SUCCESS**", False),
    ("It looks unsuccessful.", None),               # a word containing the verdict is not one
    ("SUCCESS would need a receipt.\nI cannot tell.", None),  # only the last line counts
    ("", None),
])
def test_webvoyager_verdict(reply: str, expected: bool | None) -> None:
    assert last_line_verdict(reply, *VOYAGER) is expected


@pytest.mark.parametrize("reply, expected", [
    ("reasons\nStatus: success", True),
    ("reasons\n**Status:** failure", False),
    ("Status:**success**", True),
    ("Status: success or failure, hard to say\nno verdict here", None),
])
def test_webjudge_verdict(reply: str, expected: bool | None) -> None:
    assert last_line_verdict(reply, *JUDGE) is expected


@pytest.mark.parametrize("reply, score", [
    ("Shows the filter.\nScore: 4", 4), ("Score: 4/5", 4), ("score 3", 3), ("Score (1-5): 2", 2),
    ("Score - 5", 5), ("Final score: 2 out of 5", 2),
])
def test_score_formats(reply: str, score: int) -> None:
    assert read_score(reply) == score
    assert read_score("**Score:** 4") == 4 and read_score("No score given.") is None
