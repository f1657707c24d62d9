"""SWE-bench predictions files: the three layouts, and one-line errors that name the line or id."""

from __future__ import annotations

import json

import pytest

from orchard_cli.errors import UsageError
from orchard_cli.runs.predictions import load_predictions, looks_like_diff

PATCH = """diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -1 +1 @@
-x = 1
+x = 2
"""
IDS = {"o__r-1", "o__r-2", "o__r-3"}


def _pred(i, patch=PATCH):
    return {"instance_id": i, "model_name_or_path": "m", "model_patch": patch}


def test_jsonl_json_list_and_dict_keyed_by_id_all_load(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("\n".join(json.dumps(_pred(i)) for i in ("o__r-1", "o__r-2")) + "\n\n")
    listed = tmp_path / "p.json"
    listed.write_text(json.dumps([_pred("o__r-1"), _pred("o__r-3", None)], indent=2))
    keyed = tmp_path / "k.json"
    keyed.write_text(json.dumps({"o__r-2": {"model_name_or_path": "m", "model_patch": PATCH}}))
    assert sorted(load_predictions(jsonl, IDS)) == ["o__r-1", "o__r-2"]
    loaded = load_predictions(listed, IDS)
    assert loaded["o__r-3"].model_patch == ""  # null = no patch
    assert load_predictions(keyed, IDS)["o__r-2"].model_patch == PATCH


def test_malformed_line_names_its_line_number(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(_pred("o__r-1")) + "\n" + '{"instance_id": "o__r-2", \n')
    with pytest.raises(UsageError) as err:
        load_predictions(path, IDS)
    assert "line 2" in err.value.message and "not valid JSON" in err.value.message
    assert "\n" not in err.value.message


def test_unknown_id_is_named(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(_pred("o__r-1")) + "\n" + json.dumps(_pred("other__x-9")) + "\n")
    with pytest.raises(UsageError, match=r"line 2: unknown instance 'other__x-9'"):
        load_predictions(path, IDS)


def test_patch_that_is_not_a_diff_is_refused(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"o__r-3": {"model_patch": "I fixed it by changing x to 2."}}))
    with pytest.raises(UsageError, match=r"key 'o__r-3' \(o__r-3\): model_patch is not a unified diff"):
        load_predictions(path, IDS)


@pytest.mark.parametrize("content, match", [
    ("", "empty"),
    ('{"model_patch": ""}\n', "line 1: missing instance_id"),
    (json.dumps({"instance_id": "o__r-1"}) + "\n", "missing model_patch"),
    (json.dumps(_pred("o__r-1")) + "\n" + json.dumps(_pred("o__r-1")) + "\n", "appears twice"),
    ('[{"instance_id": "o__r-1",', "not valid JSON"),
    ("[1]", "item 0: expected a JSON object"),
])
def test_other_problems_are_one_line_usage_errors(tmp_path, content, match):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(UsageError, match=match):
        load_predictions(path, IDS)


def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load_predictions(tmp_path / "nope.jsonl", IDS)


def test_diff_detection():
    assert looks_like_diff(PATCH)
    assert looks_like_diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    assert looks_like_diff("diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n")
    assert not looks_like_diff("@@ -1 +1 @@\n-a\n+b\n")  # a hunk without a file header
    assert not looks_like_diff("just text")
