"""`orchard eval compare`: per-instance flips and the paired interval, by hand and via the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from orchard_cli.errors import UsageError
from orchard_cli.records import JsonlWriter, write_json
from orchard_cli.scoring import AttemptResult
from orchard_cli.scoring.compare import compare_runs, mcnemar_exact, paired_interval


def _run_dir(path, resolved, ids, attempts=1, errors=()):
    path.mkdir()
    write_json(path / "config.json", {"schema_version": 1, "suite": "s", "source": "x",
                                      "dataset_sha256": "aa"})
    with JsonlWriter(path / "results.jsonl") as w:
        for iid in ids:
            for k in range(1, attempts + 1):
                ok = (iid, k) in resolved if attempts > 1 else iid in resolved
                cat = "infra_error" if iid in errors else "resolved" if ok else "unresolved"
                w.write(AttemptResult(instance_id=iid, attempt=k, category=cat, resolved=ok))
    return path


IDS = [f"i{n}" for n in range(1, 11)]


def test_flips_and_interval_by_hand(tmp_path):
    a = _run_dir(tmp_path / "a", {"i1", "i2", "i3", "i4", "i5"}, IDS)
    b = _run_dir(tmp_path / "b", {"i3", "i4", "i5", "i6", "i7", "i8"}, IDS)
    result = compare_runs(a, b)
    assert result.a_only == ["i1", "i2"] and result.b_only == ["i6", "i7", "i8"]
    assert result.common == 10 and result.rate_a == 0.5 and result.rate_b == 0.6
    # b = 2, c = 3, n = 10: diff = 0.1, se = sqrt(b + c - (c - b)^2 / n) / n = sqrt(4.9) / 10
    se = math.sqrt(4.9) / 10
    assert result.diff == pytest.approx(0.1)
    assert result.ci95[0] == pytest.approx(0.1 - 1.959964 * se, abs=1e-6)
    assert result.ci95[1] == pytest.approx(0.1 + 1.959964 * se, abs=1e-6)
    # exact McNemar: 2 * P(X <= 2), X ~ Bin(5, 1/2) = 2 * 16/32 -> 1.0
    assert result.mcnemar_p == 1.0


def test_mcnemar_and_interval_edges():
    assert mcnemar_exact(0, 8) == pytest.approx(2 / 256)
    assert mcnemar_exact(0, 0) == 1.0
    assert paired_interval([0.0, 0.0, 0.0]) == (0.0, 0.0, 0.0)


def test_unpaired_instances_and_errors_are_reported(tmp_path):
    a = _run_dir(tmp_path / "a", {"i1"}, IDS[:4], errors={"i2"})
    b = _run_dir(tmp_path / "b", {"i1", "i2"}, IDS[1:6])
    result = compare_runs(a, b)
    assert result.common == 3 and result.only_in_a == ["i1"] and result.only_in_b == ["i5", "i6"]
    assert result.errors_a == ["i2"] and result.b_only == ["i2"]


def test_several_attempts_compare_fractions(tmp_path):
    a = _run_dir(tmp_path / "a", {("i1", 1), ("i2", 1), ("i2", 2)}, ["i1", "i2"], attempts=2)
    b = _run_dir(tmp_path / "b", {("i1", 1), ("i1", 2)}, ["i1", "i2"], attempts=2)
    result = compare_runs(a, b)
    assert result.rate_a == 0.75 and result.rate_b == 0.5 and result.diff == pytest.approx(-0.25)
    assert result.a_only == ["i2"] and result.b_only == ["i1"] and result.mcnemar_p is None


def test_not_a_run_folder(tmp_path):
    with pytest.raises(UsageError, match="not an orchard eval run"):
        compare_runs(tmp_path, tmp_path)


def test_compare_cli_json_and_text(tmp_path):
    a = _run_dir(tmp_path / "a", {"i1", "i2"}, IDS[:4])
    b = _run_dir(tmp_path / "b", {"i2", "i3", "i4"}, IDS[:4])
    cli = [sys.executable, "-m", "orchard_cli.main", "eval", "compare", str(a), str(b)]
    proc = subprocess.run([*cli, "--format", "json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["a_only"] == ["i1"] and data["b_only"] == ["i3", "i4"] and data["diff"] == 0.25
    text = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert "B - A: +25.0 points" in text.stdout and "better in A (1): i1" in text.stdout
    missing = subprocess.run([*cli[:-2], str(tmp_path / "nope"), str(b)], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 2 and "not an orchard eval run" in missing.stderr
