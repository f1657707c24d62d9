"""The featurizer's numbers: what the base LM reads of fixed episodes, pinned.

`features-v4.npz` holds the feature rows of FIXED_EPISODES as the batched, padded, one-pass-per-
episode featurizer computed them (SmolLM2, fp32, 512 tokens; written by the code of commit
cfac927). The featurizer of today reads shared prefixes once and runs unpadded passes: its rows
must equal the pinned ones within float tolerance, in any order and grouping of the episodes.

The tolerance is fp32's, reordered: the pinned rows came from one CPU, and another one's kernels
(other vector widths, other blocking, another thread count) sum in another order, which moves
each number by a few ulps of the magnitudes summed, amplified through 30 layers. So a difference
is measured against the size of its block (the pooled hidden state, the last hidden state, the
scalars: |got - want| / (|want| + rms(block))), not against the element alone: an element near
zero (the gain a - b of two close log-probs) would otherwise fail on noise, as two rows did
on an AMD EPYC at 2.8e-3 against the old 2e-3 of |got - want| / (1e-3 + |want|).
bench/value_fp_spread.py recomputes the rows under every kernel path torch takes here (default,
AVX2, AVX-512; 1 and 2 threads), shared and alone: at most 4.5e-6 in this measure (2.1e-3 in the
old one: the default path failed it here too). TOLERANCE is 20x that; a real change (a token
off, a prefix read twice, a wrong block) moves rows by 1e-3 and more."""

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


HIDDEN = 576            # SmolLM2-135M: the row is [pooled hidden | last hidden | scalars]
TOLERANCE = 1e-4        # see the module's docstring


def _scaled_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| / (|want| + the rms of want's block in its row)."""
    scale = np.zeros_like(want, dtype=np.float64)
    for part in (slice(0, HIDDEN), slice(HIDDEN, 2 * HIDDEN), slice(2 * HIDDEN, want.shape[1])):
        scale[:, part] = np.sqrt(np.mean(np.square(want[:, part], dtype=np.float64), axis=1, keepdims=True))
    return np.abs(got.astype(np.float64) - want) / (np.abs(want) + scale + 1e-12)


def _assert_rows_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    worst = _scaled_error(got, want)
    assert float(worst.max()) < TOLERANCE, \
        f"row {int(worst.max(axis=1).argmax())}: max scaled error {worst.max():.2e} (tolerance {TOLERANCE:.0e})"


def test_the_tolerance_takes_fp32_reordering_and_not_a_real_change(pinned) -> None:
    """Noise of fp32 summed in another order (a few ulps of each block's magnitude) passes, even on
    elements near zero where the old measure failed; a real change of one number fails."""
    want = pinned["features"]
    rng = np.random.default_rng(0)
    noise = np.zeros_like(want)
    for part in (slice(0, HIDDEN), slice(HIDDEN, 2 * HIDDEN), slice(2 * HIDDEN, want.shape[1])):
        rms = np.sqrt(np.mean(np.square(want[:, part]), axis=1, keepdims=True))
        noise[:, part] = rng.standard_normal(want[:, part].shape) * rms * 2e-6   # ~16 ulps of the block
    noisy = (want + noise).astype(np.float32)
    old = np.abs(noisy - want) / (1e-3 + np.abs(want))
    assert old.max() > 2e-3, "the noise is too small to show the old measure's flaw"
    _assert_rows_equal(noisy, want)
    for row, column, factor in ((0, 10, 1.001), (3, HIDDEN + 5, 1.001), (5, 2 * HIDDEN + 4, 1.01), (6, 2 * HIDDEN + 23, 1.001)):
        changed = want.copy()
        changed[row, column] = changed[row, column] * factor + (1e-3 if changed[row, column] == 0 else 0)
        with pytest.raises(AssertionError):
            _assert_rows_equal(changed, want)
    with pytest.raises(AssertionError):
        _assert_rows_equal(want[[1, 0, 2, 3, 4, 5, 6]], want)     # two candidates' rows swapped


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
