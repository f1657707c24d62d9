"""The optional LLM judge: its score sits beside each verdict in results.jsonl and the scorecard,
and never changes a verdict. The judge here is a real OpenAI-compatible server (the in-package
scripted endpoint) spoken to by the official `openai` client."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchard_cli.scoring.rubric_judge import parse_verdict
from orchard_cli.models.scripted import ScriptedEndpoint


def test_a_judge_reply_is_read_or_refused():
    assert parse_verdict('```json\n{"score": 0.25, "rationale": "half"}\n```') == (0.25, "half")
    for bad in ("no json here", '{"score": 3}', '{"rationale": "x"}'):
        with pytest.raises((ValueError, KeyError)):
            parse_verdict(bad)


@pytest.mark.bwrap
def test_eval_reports_the_judge_beside_the_verdicts(tmp_path):
    judge = ScriptedEndpoint(['{"score": 0.2, "rationale": "looks wrong"}', "not json at all"], model="judge")
    info = judge.start()
    try:
        out = tmp_path / "run"
        proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", "eval", "claw-mini", "--predictions", "gold",
                               "--instances", "mail-lookup-1004,contacts-1002", "--out", str(out),
                               "--judge-model", "judge", "--judge-base-url", info.base_url],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert all(r["resolved"] for r in rows), "a judge never changes a verdict"
        judged = sorted((r["judge"] for r in rows), key=lambda j: j["score"] is None)
        assert judged[0]["score"] == 0.2 and judged[0]["rationale"] == "looks wrong"
        assert judged[1]["score"] is None and "JSON" in judged[1]["error"]
        card = json.loads((out / "scorecard.json").read_text())
        assert card["resolved"] == 2 and card["judged"] == 1
        assert card["judge_mean"] == 0.2 and card["judge_agreement"] == 0.0
        assert "judge (1 attempts" in proc.stderr
        prompt = judge.requests[0]["body"]["messages"][1]["content"]
        assert "Tool calls:" in prompt and "Final answer:" in prompt and "Rubric:" in prompt
    finally:
        judge.stop()


def test_a_judge_model_without_its_endpoint_is_bad_input(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", "eval", "claw-mini", "--predictions", "gold",
                           "--limit", "1", "--out", str(tmp_path / "r"), "--judge-model", "j"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--judge-base-url" in proc.stderr
    assert not (tmp_path / "r").exists()
