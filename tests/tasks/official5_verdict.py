"""Run inside a virtual environment holding swebench 5.x: the official verdicts of given logs.

stdin: a JSON list of {instance_id, repo, version, log_parser, FAIL_TO_PASS, PASS_TO_PASS, log};
stdout: a JSON list of {resolved, tests_status} from swebench's own `get_eval_report`.
swebench's package __init__ files import its whole world (docker, modal...), so the two package
objects are stood in for and only the grading modules load (they need `unidiff` only).
"""

import importlib.util
import json
import os
import sys
import tempfile
import types

root = importlib.util.find_spec("swebench").submodule_search_locations[0]
for name, sub in (("swebench", ""), ("swebench.harness", "/harness")):
    module = types.ModuleType(name)
    module.__path__ = [root + sub]
    sys.modules[name] = module

from swebench.harness.grading import get_eval_report  # noqa: E402
from swebench.types import TestSpec  # noqa: E402

out = []
for case in json.load(sys.stdin):
    spec = TestSpec(instance_id=case["instance_id"], image="", eval_script_list=[],
                    repo=case["repo"], version=case["version"], FAIL_TO_PASS=case["FAIL_TO_PASS"],
                    PASS_TO_PASS=case["PASS_TO_PASS"], log_parser=case["log_parser"],
                    eval_type="pass_and_fail")
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as handle:
        handle.write(case["log"])
    try:
        prediction = {"instance_id": case["instance_id"], "model_patch": "diff",
                      "model_name_or_path": "orchard-crosscheck"}
        report = get_eval_report(spec, prediction, handle.name, True)[case["instance_id"]]
    finally:
        os.unlink(handle.name)
    out.append({"resolved": report["resolved"], "tests_status": report.get("tests_status")})
json.dump(out, sys.stdout)
