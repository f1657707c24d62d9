"""The featurizer's numbers: what the base LM reads of fixed episodes, pinned.

`features-v4.npz` holds the feature rows of FIXED_EPISODES as the batched, padded, one-pass-per-
episode featurizer computed them (SmolLM2, fp32, 512 tokens; written by the code of commit
cfac927). The featurizer of today reads shared prefixes once and runs unpadded passes: its rows
must equal the pinned ones within float tolerance, in any order and grouping of the episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchard_cli.value import actions, data

PINNED = Path(__file__).parent / "data" / "features-v4.npz"

PROBLEM_A = ("`parse_duration('1h30m')` returns 5400 as expected, but `parse_duration('90s')` raises "
             "ValueError: unknown unit. Seconds are documented in the README as a supported unit, and "
             "`parse_duration('2m')` works. The tokenizer in durations.py only knows 'h' and 'm'.\n") * 3
PROBLEM_B = "slugify() drops digits at the end of a word: slugify('abc123 def') gives 'abc-def'."

SOURCE = ["import re", "", "UNITS = {'h': 3600, 'm': 60}", "", "def parse_duration(text):",
          "    total = 0", "    for number, unit in re.findall(r'(\\d+)([a-z])', text):",
          "        if unit not in UNITS:", "            raise ValueError('unknown unit')",
          "        total += int(number) * UNITS[unit]", "    return total", ""]


def _patch(old: list[str], new: list[str], path: str = "durations.py") -> str:
    import difflib

    body = "".join(line + "\n" for line in difflib.unified_diff(old, new, f"a/{path}", f"b/{path}", lineterm="", n=3))
    return f"diff --git a/{path} b/{path}\n{body}"


def _variant(**edits: str) -> list[str]:
    out = list(SOURCE)
    for index, line in edits.items():
        out[int(index[1:])] = line
    return out


GOLD_A = _patch(SOURCE, _variant(l2="UNITS = {'h': 3600, 'm': 60, 's': 1}"))
NEAR_A = _patch(SOURCE, _variant(l2="UNITS = {'h': 3600, 'm': 60, 's': 60}"))
TWO_HUNKS_A = _patch(SOURCE + [""] * 8 + ["def total(values):", "    return sum(values)", ""],
                     _variant(l2="UNITS = {'h': 3600, 'm': 60, 's': 1}") + [""] * 8
                     + ["def total(values):", "    return sum(values) or 0", ""])
PATCH_B = ("diff --git a/slugify.py b/slugify.py\n--- a/slugify.py\n+++ b/slugify.py\n@@ -1,3 +1,3 @@\n"
           " def slugify(text):\n-    words = re.findall('[a-z]+', text.lower())\n"
           "+    words = re.findall('[a-z0-9]+', text.lower())\n     return '-'.join(words)\n")
TRAJECTORY = "\n".join(f"[call] bash({{\"command\": \"sed -n {i},{i + 40}p durations.py\"}})\n[tool] "
                       + " ".join(SOURCE) for i in range(12))


def fixed_episodes() -> list[data.Episode]:
    ep = data.Episode
    claw = actions.actions_of(__import__("orchard_cli.evidence", fromlist=["Evidence"]).Evidence(
        answer="Archived the two newsletters.", dispatches=[]))
    return [
        ep(suite="swe-mini", task_id="a", harness="bash", problem=PROBLEM_A, patch=GOLD_A, category="resolved", resolved=True),
        ep(suite="swe-mini", task_id="a", harness="bash", problem=PROBLEM_A, patch=NEAR_A, category="unresolved"),
        ep(suite="swe-mini", task_id="a", harness="bash", problem=PROBLEM_A, patch=TWO_HUNKS_A, category="resolved", resolved=True),
        ep(suite="swe-mini", task_id="a", harness="bash", problem=PROBLEM_A, patch="", category="empty_patch"),
        ep(suite="swe-mini", task_id="a", harness="bash", problem=PROBLEM_A, trajectory=TRAJECTORY, patch=NEAR_A,
           category="unresolved"),
        ep(suite="swe-mini", task_id="b", harness="bash", problem=PROBLEM_B, patch=PATCH_B, category="resolved", resolved=True),
        ep(suite="claw-mini", task_id="c", harness="bash", problem="Archive the newsletters in my inbox.",
           actions=claw, category="resolved", resolved=True),
    ]


@pytest.fixture(scope="module")
def pinned() -> dict[str, np.ndarray]:
    with np.load(PINNED) as saved:
        return {k: saved[k] for k in saved.files}


def _featurizer(base: Any, **reading: Any) -> Any:
    from orchard_cli.value.features import Featurizer
    from orchard_cli.value.model import base_identity
    from orchard_cli.value.reading import Reading

    return Featurizer(base, max_tokens=512, fingerprint=base_identity("smollm2", base).fingerprint, precision="fp32",
                      spec="smollm2", reading=Reading(**{"cache": False, "device": "cpu", **reading}))


def _assert_rows_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    worst = np.abs(got - want) / (1e-3 + np.abs(want))
    assert float(worst.max()) < 2e-3, f"row {int(worst.max(axis=1).argmax())}: max relative error {worst.max():.2e}"


def test_the_pinned_episodes_are_the_ones_that_were_read(pinned) -> None:
    assert pinned["digests"].tolist() == [ep.digest() for ep in fixed_episodes()]


def test_features_equal_the_pinned_rows_with_prefixes_shared(value_base, pinned) -> None:
    """The same numbers as the batched, padded featurizer, in any order and grouping: all seven
    together (task a's five candidates share their problem), each alone, and reversed."""
    from orchard_cli.value.features import clear_cache, shared_prefixes

    eps = fixed_episodes()
    f = _featurizer(value_base, threads=1)
    ids = sorted(f.encode(ep)["ids"] for ep in eps)
    runs = shared_prefixes(ids)
    assert any(hi - lo >= 4 and length >= 100 for lo, hi, length in runs), runs  # task a shares its problem
    clear_cache()
    _assert_rows_equal(f.features(eps), pinned["features"])
    clear_cache()
    _assert_rows_equal(np.stack([f.compute([ep])[0] for ep in eps]), pinned["features"])
    clear_cache()
    _assert_rows_equal(f.features(eps[::-1])[::-1], pinned["features"])


def test_feature_rows_are_kept_on_disk_and_read_back_without_the_lm(value_base, pinned, tmp_path, monkeypatch) -> None:
    """A second process (here: a cleared in-memory cache) reads nothing again: every row comes
    from ORCHARD_HOME/cache/value-features; a torn file there is read again, not trusted."""
    from orchard_cli.value.features import clear_cache

    monkeypatch.setenv("ORCHARD_HOME", str(tmp_path))
    eps = fixed_episodes()[:3]
    f = _featurizer(value_base, cache=True)
    clear_cache()
    first = f.features(eps)
    files = sorted((tmp_path / "cache" / "value-features").rglob("*.npy"))
    assert len(files) == 3 and f.computed == 3
    files[0].write_bytes(files[0].read_bytes()[:100])  # torn
    clear_cache()
    again = _featurizer(value_base, cache=True)
    second = again.features(eps)
    assert again.computed == 1
    _assert_rows_equal(second, first)
    assert not list((tmp_path / "cache" / "value-features").rglob("*.partial"))


def test_two_worker_processes_read_the_same_rows(value_base, pinned, smollm2_home, monkeypatch) -> None:
    """--workers 2: spawned processes, each with its own copy of the base, the rows in order."""
    from orchard_cli.value.features import clear_cache

    monkeypatch.setenv("ORCHARD_HOME", str(smollm2_home))  # the workers load the converted base from its cache
    f = _featurizer(value_base, workers=2, threads=1)
    clear_cache()
    _assert_rows_equal(f.features(fixed_episodes()), pinned["features"])
    assert f.computed == 7


def test_a_device_torch_cannot_see_is_a_usage_error(value_base) -> None:
    from orchard_cli.errors import UsageError
    from orchard_cli.value.features import clear_cache

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")  # never in CI: CI has none
    clear_cache()
    with pytest.raises(UsageError, match="no CUDA device"):
        _featurizer(value_base, device="cuda").features(fixed_episodes()[:1])
