"""Append-only JSONL records: whole records survive a writer that dies mid-record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from orchard_cli.errors import UsageError
from orchard_cli.records import JsonlWriter, read_json, read_jsonl, write_json


def test_roundtrip_and_schema_version_required(tmp_path):
    path = tmp_path / "r.jsonl"
    with JsonlWriter(path) as writer:
        writer.write({"schema_version": 1, "n": 1, "text": "line\nbreak"})
        writer.write({"schema_version": 1, "n": 2})
        with pytest.raises(ValueError, match="schema_version"):
            writer.write({"n": 3})
    rows, report = read_jsonl(path)
    assert [r["n"] for r in rows] == [1, 2]
    assert rows[0]["text"] == "line\nbreak"
    assert not report.torn_tail and report.bad_lines == []
    assert path.read_bytes().count(b"\n") == 2  # one line per record, newlines escaped inside


def _run_child(path, script):
    code = textwrap.dedent(f"""
        import os, sys
        from orchard_cli import records
        from orchard_cli.records import JsonlWriter
        writer = JsonlWriter({str(path)!r})
        {textwrap.indent(textwrap.dedent(script), '        ').strip()}
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_writer_killed_mid_record_leaves_only_whole_records(tmp_path):
    path = tmp_path / "results.jsonl"
    # The child writes 50 records, then dies (os._exit) after writing half of the 51st.
    proc = _run_child(path, """
        for i in range(50):
            writer.write({"schema_version": 1, "i": i, "pad": "x" * 300})
        real_write = os.write
        def torn(fd, data):
            real_write(fd, bytes(data[: len(data) // 2]))
            os._exit(9)
        records.os.write = torn
        writer.write({"schema_version": 1, "i": 50, "pad": "x" * 300})
    """)
    assert proc.returncode == 9, proc.stderr
    assert not path.read_bytes().endswith(b"\n")  # the file really is torn
    rows, report = read_jsonl(path)
    assert [r["i"] for r in rows] == list(range(50))
    assert report.torn_tail and report.bad_lines == []

    # A new writer cuts the fragment before appending: the next record is whole and readable.
    writer = JsonlWriter(path)
    assert writer.repaired
    writer.write({"schema_version": 1, "i": 51})
    writer.close()
    rows, report = read_jsonl(path)
    assert [r["i"] for r in rows] == [*range(50), 51]
    assert not report.torn_tail and report.bad_lines == []


def test_a_tail_without_newline_is_never_a_record_even_if_it_parses(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"schema_version":1,"i":0}\n{"schema_version":1,"i":1}')
    rows, report = read_jsonl(path)
    assert [r["i"] for r in rows] == [0]
    assert report.torn_tail


def test_bad_complete_lines_are_flagged_with_their_numbers(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"schema_version":1,"i":0}\nnot json\n{"i":2}\n[1]\n{"schema_version":1,"i":4}\n')
    rows, report = read_jsonl(path)
    assert [r["i"] for r in rows] == [0, 4]
    assert report.bad_lines == [2, 3, 4]


def test_sigkill_at_random_moments_never_yields_a_partial_record(tmp_path):
    path = tmp_path / "r.jsonl"
    code = textwrap.dedent(f"""
        from orchard_cli.records import JsonlWriter
        w = JsonlWriter({str(path)!r})
        i = 0
        print("ready", flush=True)
        while True:
            w.write({{"schema_version": 1, "i": i, "pad": "y" * (i % 5000)}})
            i += 1
    """)
    for delay in (0.3, 0.55):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        rows, report = read_jsonl(path)
        assert rows, "the writer made no progress"
        assert [r["i"] for r in rows] == list(range(len(rows)))  # contiguous, whole records only
        assert report.bad_lines == []
        path.unlink()


def test_concurrent_writers_never_interleave(tmp_path):
    path = tmp_path / "r.jsonl"
    writer = JsonlWriter(path, fsync=False)

    def work(t):
        for i in range(200):
            writer.write({"schema_version": 1, "t": t, "i": i, "pad": "z" * (t * 500)})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    writer.close()
    rows, report = read_jsonl(path)
    assert len(rows) == 800 and report.bad_lines == [] and not report.torn_tail
    for t in range(4):
        assert [r["i"] for r in rows if r["t"] == t] == list(range(200))


def test_json_documents_are_replaced_atomically_and_checked(tmp_path):
    path = tmp_path / "config.json"
    write_json(path, {"schema_version": 1, "a": 1})
    write_json(path, {"schema_version": 1, "a": 2})
    assert read_json(path)["a"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temp file left
    path.write_text(json.dumps({"a": 1}))
    with pytest.raises(UsageError, match="no schema_version"):
        read_json(path)
    path.write_text("{")
    with pytest.raises(UsageError, match="not valid JSON"):
        read_json(path)


def test_trajectories_of_schema_1_still_read(tmp_path):
    """Schema 2 added `evidence` and family categories; a line orchard 0.1 wrote reads as before."""
    from orchard_cli.trajectory import read_trajectories

    old = {"schema_version": 1, "episode_id": "ep-0123456789abcdef", "task_id": "acme__calc-1", "suite": "s",
           "family": "swe", "source": "agent", "harness": "bash", "harness_version": "1", "model": "m",
           "attempt": 1, "problem_statement": "p", "calls": [], "messages": [], "tools": [],
           "outcome": {"resolved": False, "category": "empty_patch", "reward": 0.0, "details": {}},
           "patch": "", "started_at": 1.0, "duration_seconds": 2.0, "tokens_in": 0, "tokens_out": 0,
           "cost_usd": None, "harness_exit_code": 0, "errors": [], "metadata": {}}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (record,) = read_trajectories(path)
    assert record.schema_version == 1 and record.evidence is None and record.outcome.category == "empty_patch"


def test_an_atomic_write_that_cannot_land_leaves_no_temp_file(tmp_path):
    """The rename onto a folder fails: a one-line usage error, the folder as it was, no stray .tmp."""
    from orchard_cli.errors import UsageError
    from orchard_cli.records import write_text

    target = tmp_path / "report.md"
    target.mkdir()
    (target / "mine.txt").write_text("kept")
    with pytest.raises(UsageError, match="is a folder; name a file to write"):
        write_text(target, "# report\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]
    assert [p.name for p in target.iterdir()] == ["mine.txt"]
