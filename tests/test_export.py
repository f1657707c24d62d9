"""`orchard distill export FILE --format hf --out DIR` on trajectories a real distill run wrote:
Parquet in the published Orchard layout (tools, messages, metadata), read back with pandas."""

from __future__ import annotations

import json

import pytest

import distill_world as dw
from orchard_cli.main import main

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]
pd = pytest.importorskip("pandas", reason="the swe extra (pandas, pyarrow) is not installed")


@pytest.fixture
def distilled(tmp_path_factory, monkeypatch):
    return dw.distilled(tmp_path_factory, monkeypatch)


def cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_export_writes_parquet_with_the_three_columns(distilled, tmp_path, capsys):
    out = tmp_path / "hf"
    code, stdout, stderr = cli(capsys, "distill", "export", str(distilled), "--format", "hf", "--out", str(out))
    assert code == 0, stderr
    files = stdout.split()
    assert files == [str(out / "swe" / "train" / "data-00000-of-00001.parquet")]
    frame = pd.read_parquet(files[0])
    assert list(frame.columns) == ["tools", "messages", "metadata"] and len(frame) == 4
    meta = [json.loads(m) for m in frame["metadata"]]
    assert sorted(m["verify_status"] for m in meta) == ["empty_patch", "empty_patch", "resolved", "resolved"]
    assert {m["model"] for m in meta} == {"fixer", "idler"} and {m["harness"] for m in meta} == {"bash"}
    assert {m["instance_id"] for m in meta} == {"acme__calc-1", "acme__calc-2"}
    fixed = next(i for i, m in enumerate(meta) if m["verify_status"] == "resolved")
    assert meta[fixed]["resolved"] and "return a + b" in meta[fixed]["patch"] and meta[fixed]["tokens_in"] > 0
    tools = json.loads(frame["tools"][fixed])
    assert tools[0]["function"]["name"] == "bash"
    messages = list(frame["messages"][fixed])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    call = messages[2]["tool_calls"][0]
    assert call["function"]["name"] == "bash" and dw.FIX_COMMAND in json.loads(call["function"]["arguments"])["command"]
    assert messages[3]["tool_call_id"] == call["id"] and messages[4]["content"] == "add() now adds."
    card = (out / "README.md").read_text()
    assert 'path: "swe/train/*.parquet"' in card and "num_examples: 4" in card
    assert "exported 4 trajectories" in stderr and "unreadable" not in stderr and "torn" not in stderr


def test_export_counts_the_lines_it_could_not_read(distilled, tmp_path, capsys):
    """Lines that are not records and a torn tail are left out, and said (not silently dropped)."""
    damaged = tmp_path / "damaged.jsonl"
    lines = distilled.read_bytes().splitlines(keepends=True)
    damaged.write_bytes(lines[0] + b"not json at all\n" + b"".join(lines[1:]) + b'[1, 2]\n{"schema_version": 1, "ep')
    code, stdout, stderr = cli(capsys, "distill", "export", str(damaged), "--out", str(tmp_path / "hf"), "--json")
    result = json.loads(stdout)
    assert code == 0 and result["rows"] == 4, stderr
    assert result["unreadable"] == [2, len(lines) + 2] and result["torn_tail"] is True, result
    code, _, stderr = cli(capsys, "distill", "export", str(damaged), "--out", str(tmp_path / "hf2"))
    assert code == 0 and "2 unreadable line(s) left out (line 2, %d)" % (len(lines) + 2) in stderr, stderr
    assert "a torn last line left out" in stderr, stderr


def test_export_only_resolved_and_refuses_a_used_folder(distilled, tmp_path, capsys):
    out = tmp_path / "hf"
    code, stdout, _ = cli(capsys, "distill", "export", str(distilled), "--out", str(out), "--keep", "resolved",
                          "--json")
    result = json.loads(stdout)
    assert code == 0 and result["rows"] == 2 and result["skipped"] == 2 and result["by_status"] == {"resolved": 2}
    frame = pd.read_parquet(out / "swe" / "train")
    assert all(json.loads(m)["verify_status"] == "resolved" for m in frame["metadata"])
    code, _, stderr = cli(capsys, "distill", "export", str(distilled), "--out", str(out))
    assert code == 2 and "is not empty" in stderr
    code, _, stderr = cli(capsys, "distill", "export", str(distilled), "--out", str(tmp_path / "x"), "--format", "csv")
    assert code == 2 and "use hf, trl, verl-sft" in stderr
    (tmp_path / "junk.jsonl").write_text('{"schema_version": 1, "colour": "red"}\n')
    code, _, stderr = cli(capsys, "distill", "export", str(tmp_path / "junk.jsonl"), "--out", str(tmp_path / "y"))
    assert code == 2 and "record 1 is not a trajectory" in stderr
