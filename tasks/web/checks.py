"""Web checks: deterministic, program-only (WebArena's kinds), over one episode's evidence.

    answer    the final answer (`answer`/`send_msg_to_user`): the claw family's answer check
              (exact after normalising, includes, excludes, regex, a number with a tolerance)
    request   the apps' request log (evidence.state["requests"]): requests to `site` with this
              `method` and `path` (and `status`, if given) whose form and query hold the given
              fields; `count` of them exactly (default: at least one). Irreversible actions are checked this way: the
              order was placed once, with the right variant
    state     a read-only SQL query on a site's database after the episode (run by collect, kept
              in evidence.state["queries"][id]): its rows, exactly and in order

Every check of a task is required; the share passed is reported beside the verdict.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchard_cli.tasks.kit.checks import AnswerCheck, CheckResult, run_answer


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    description: str = ""


class RequestCheck(_Check):
    kind: Literal["request"] = "request"
    site: str
    method: str = "POST"
    path: str
    form: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    status: int | None = None
    """Only requests the app answered with this status (303: a form it accepted; 422: refused)."""
    count: int | None = Field(None, ge=0)


class StateCheck(_Check):
    kind: Literal["state"] = "state"
    site: str
    sql: str
    expect: list[list[Any]]

    @model_validator(mode="after")
    def _select(self) -> "StateCheck":
        if not re.match(r"^\s*(select|with)\b", self.sql, re.IGNORECASE):
            raise ValueError(f"check {self.id!r}: `sql` must be a SELECT")
        return self


Check = Annotated[Union[AnswerCheck, RequestCheck, StateCheck], Field(discriminator="kind")]


def _same(a: Any, b: Any) -> bool:
    return str(a).strip() == str(b).strip()


def request_matches(check: RequestCheck, request: dict[str, Any]) -> bool:
    if request.get("site") != check.site or str(request.get("method", "")).upper() != check.method.upper():
        return False
    if request.get("path") != check.path or (check.status is not None and request.get("status") != check.status):
        return False
    form, query = request.get("form") or {}, request.get("query") or {}
    return (all(k in form and _same(form[k], v) for k, v in check.form.items())
            and all(k in query and _same(query[k], v) for k, v in check.query.items()))


def run_request(check: RequestCheck, requests: list[dict[str, Any]]) -> CheckResult:
    n = sum(request_matches(check, r) for r in requests)
    ok = n == check.count if check.count is not None else n >= 1
    want = f"exactly {check.count}" if check.count is not None else "at least 1"
    fields = {**check.form, **{f"?{k}": v for k, v in check.query.items()}}
    return CheckResult(id=check.id, kind=check.kind, required=True, passed=ok,
                       detail=f"{n} {check.method} {check.site}{check.path} request(s)"
                              f"{' with ' + json.dumps(fields) if fields else ''} (expected {want})")


def run_state(check: StateCheck, queries: dict[str, Any]) -> CheckResult:
    if check.id not in queries:
        return CheckResult(id=check.id, kind=check.kind, required=True, passed=False,
                           detail="the query did not run (no apps after the episode)")
    got = queries[check.id]
    if isinstance(got, dict) and "error" in got:
        return CheckResult(id=check.id, kind=check.kind, required=True, passed=False,
                           detail=f"the query failed: {got['error']}")
    ok = json.loads(json.dumps(got)) == json.loads(json.dumps(check.expect))
    shown = json.dumps(got)[:300]
    return CheckResult(id=check.id, kind=check.kind, required=True, passed=ok,
                       detail=f"rows {shown}" + ("" if ok else f" (expected {json.dumps(check.expect)[:300]})"))


def run_checks(checks: list[Any], answer: str | None, state: dict[str, Any]) -> list[CheckResult]:
    results = []
    for check in checks:
        if check.kind == "answer":
            results.append(run_answer(check, answer))
        elif check.kind == "request":
            results.append(run_request(check, state.get("requests") or []))
        else:
            results.append(run_state(check, state.get("queries") or {}))
    return results
