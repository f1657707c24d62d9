"""One episode's page data: everything it left, in the order it happened, as plain JSON.

    facts       task, attempt, verdict, model, harness, tokens, cost, time, groups
    prompt      the task as the agent got it
    calls       every model call: what was new in its prompt, what the model answered, tokens,
                time, status, error (the conversation of call N is calls 1..N, not only the last)
    steps       the tool dispatches in order, each with the screenshot taken after it (web: the
                start page first), and screenshots no dispatch explains at the end
    evidence    the final answer, the patch, files, command outputs, each service's state diff
                (before the solver -> after), protocol logs
    grading     per-check verdicts with their kinds, test lists, the grader's output, the error
    judge       an LLM judge's score and rationale, when one ran

Texts are cut (`LIMIT` characters, the cut said) so a page stays fast; the log folder keeps all.
Screenshots and images go through `shots(path) -> relative URL` (the site copies them in).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchard_cli.evidence import EVIDENCE_FILE, SCREENSHOT, Evidence
from orchard_cli.viewer.sources import Entry

LIMIT = 20_000
STEP = re.compile(r"^step-(\d+)\.png$")
Shots = Callable[[Path], str | None]


def cut(text: Any, limit: int = LIMIT) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str, indent=1)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit:,} more characters; the log folder keeps them all]"


def _read(path: Path | None, limit: int = LIMIT, tail: bool = False) -> str | None:
    if path is None or not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if tail and len(text) > limit:
        return f"[… {len(text) - limit:,} earlier characters; the log folder keeps them all]\n" + text[-limit:]
    return cut(text, limit)


def _json(path: Path | None) -> Any:
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _content(content: Any, images: Callable[[str], str | None]) -> dict[str, Any]:
    """A message's text and its images (an `orchard-image:` reference or a data URL)."""
    if content is None:
        return {"text": ""}
    if isinstance(content, str):
        return {"text": cut(content, 8000)}
    texts, pictures = [], []
    for part in content if isinstance(content, list) else [content]:
        if not isinstance(part, dict):
            texts.append(str(part))
            continue
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if isinstance(url, str) and url.startswith("orchard-image:"):
            found = images(url.removeprefix("orchard-image:"))
            if found:
                pictures.append(found)
            continue
        if isinstance(url, str) and url.startswith("data:image/"):
            continue  # inline bytes are not copied into the page
        texts.append(str(part.get("text") or part.get("content") or ""))
    return {"text": cut("\n".join(t for t in texts if t), 8000), "images": pictures}


def _message(message: dict[str, Any], images: Callable[[str], str | None]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": str(message.get("role", "")), **_content(message.get("content"), images)}
    if message.get("reasoning_content"):
        out["reasoning"] = cut(str(message["reasoning_content"]), 8000)
    calls = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        calls.append({"name": str(fn.get("name", "")), "arguments": cut(str(fn.get("arguments") or ""), 4000)})
    if calls:
        out["tool_calls"] = calls
    if message.get("tool_call_id"):
        out["tool_call_id"] = str(message["tool_call_id"])
    return out


def model_calls(trajectory: Any, images: Callable[[str], str | None]) -> list[dict[str, Any]]:
    """Every call: the messages its prompt added to the one before, and its answer."""
    from orchard_cli.conversation import call_conversation

    out, seen = [], 0
    for record in trajectory.calls:
        try:
            messages, _ = call_conversation(record)
        except Exception:  # an untranslatable record still shows its numbers
            messages = []
        answer = messages[-1] if messages and messages[-1].get("role") == "assistant" and record.response else None
        prompt = messages[:-1] if answer is not None else messages
        new = prompt[seen:] if len(prompt) >= seen else prompt
        seen = len(prompt)
        usage = record.usage
        out.append({
            "seq": record.seq, "endpoint": record.endpoint + (" (stream)" if record.stream else ""),
            "status": record.status, "seconds": round(record.timing.ended_ms / 1000, 2),
            "tokens_in": usage.input_tokens if usage else None, "tokens_out": usage.output_tokens if usage else None,
            "error": f"{record.error.type}: {record.error.message}" if record.error else None,
            "finish": _finish(record.response),
            "new": [_message(m, images) for m in new], "answer": _message(answer, images) if answer else None})
    return out


def _finish(response: Any) -> str | None:
    """Why the model stopped answering (`length`: it ran out of tokens), as the response says."""
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
    else:  # the Responses API: incomplete_details.reason (max_output_tokens), else its status
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else response.get("status")
    return str(reason) if reason else None


def _shots(log_dir: Path | None) -> list[tuple[int, Path]]:
    if log_dir is None or not log_dir.is_dir():
        return []
    found = []
    for path in log_dir.iterdir():
        match = STEP.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def steps(evidence: Evidence | None, log_dir: Path | None, shots: Shots) -> list[dict[str, Any]]:
    """Dispatches in order, each with the page after it (step-NNN.png: N = 0 the start page,
    N = k after the k-th action); screenshots without a dispatch at the end; else the last page."""
    pictures = {n: p for n, p in _shots(log_dir)}
    out: list[dict[str, Any]] = []
    if 0 in pictures:
        out.append({"kind": "page", "label": "start page", "shot": shots(pictures.pop(0))})
    for number, d in enumerate(evidence.dispatches if evidence else [], 1):
        out.append({"kind": "dispatch", "seq": d.seq, "tool": d.tool, "arguments": cut(d.arguments, 4000),
                    "status": d.status, "result": cut(d.result, 6000) if d.result is not None else None,
                    "shot": shots(pictures.pop(number)) if number in pictures else None})
    for number, path in sorted(pictures.items()):
        out.append({"kind": "page", "label": f"page {number}", "shot": shots(path)})
    last = log_dir / SCREENSHOT if log_dir is not None else None
    if not any(s.get("shot") for s in out) and last is not None and last.is_file():
        out.append({"kind": "page", "label": "the page as the episode ended", "shot": shots(last)})
    return out


def evidence_view(evidence: Evidence | None) -> dict[str, Any]:
    from orchard_cli.view import state_diff

    if evidence is None:
        return {}
    out: dict[str, Any] = {}
    if evidence.answer:
        out["answer"] = cut(evidence.answer)
    if evidence.patch is not None:
        out["patch"] = cut(evidence.patch, 60_000)
    if evidence.files:
        out["files"] = {path: cut(text) for path, text in list(evidence.files.items())[:50]}
    if evidence.commands:
        out["commands"] = [{"command": c.command, "exit_code": c.exit_code, "output": cut(c.stdout + c.stderr)}
                           for c in evidence.commands[:50]]
    changes, states = {}, {}
    for name, state in evidence.state.items():
        if name in evidence.state_before:
            changes[name] = cut(state_diff(name, evidence.state_before[name], state), 40_000)
        else:  # no snapshot from before the solver: the state as it was after
            states[name] = cut(state, 8000)
    if changes:
        out["state"] = changes
    if states:
        out["state_after"] = states
    if evidence.logs:
        out["logs"] = {name: cut(text) for name, text in evidence.logs.items()}
    return out


def grading(entry: Entry, outcome: dict[str, Any] | None, log_dir: Path | None) -> dict[str, Any]:
    tests = dict((outcome or {}).get("tests") or {})
    if not tests and entry.trajectory is not None:
        tests = dict(entry.trajectory.outcome.details)
    checks = tests.pop("checks", None)
    kinds = tests.pop("check_kinds", None) or {}
    out: dict[str, Any] = {"category": entry.category, "resolved": entry.resolved}
    if isinstance(checks, dict):
        out["checks"] = [{"id": k, "passed": bool(v), "kind": kinds.get(k)} for k, v in checks.items()]
    lists = {}
    for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        value = tests.pop(group, None)
        if isinstance(value, dict):
            lists[group] = {s: [str(t) for t in (value.get(s) or [])][:500] for s in ("success", "failure")}
    if lists:
        out["tests"] = lists
    out["facts"] = {k: v for k, v in tests.items() if isinstance(v, (str, int, float, bool)) and k != "error"}
    error = (outcome or {}).get("error") or tests.get("error") or entry.error
    if error:
        out["error"] = cut(str(error), 4000)
    output = _read(log_dir / "test_output.txt" if log_dir else None, 30_000, tail=True)
    if output:
        out["output"] = output
    return out


def episode_detail(entry: Entry, shots: Shots, images: Callable[[str], str | None]) -> dict[str, Any]:
    """The page data of one episode."""
    t, log_dir = entry.trajectory, entry.log_dir
    evidence = t.evidence if t is not None and t.evidence is not None else None
    if evidence is None and log_dir is not None:
        raw = _json(log_dir / EVIDENCE_FILE)
        try:
            evidence = Evidence.model_validate(raw) if raw is not None else None
        except ValueError:
            evidence = None
    outcome = _json(log_dir / "outcome.json") if log_dir is not None else None
    facts = {"task": entry.task, "attempt": entry.attempt, "verdict": entry.category}
    if entry.model:
        facts["model"] = entry.model
    if t is not None:
        facts["harness"] = t.harness + (f" {t.harness_version}" if t.harness_version else "")
        facts["calls"] = len(t.calls)
        facts["tokens"] = f"{t.tokens_in:,} in / {t.tokens_out:,} out"
    elif entry.tokens is not None:
        facts["tokens"] = f"{entry.tokens:,}"
    facts["cost"] = "unknown" if entry.cost is None else f"${entry.cost:.4f}"
    facts["time"] = f"{entry.seconds:.1f} s"
    facts.update({f"group {k}": v for k, v in entry.groups.items()})
    if log_dir is not None:
        facts["log folder"] = log_dir.name if log_dir.parent is None else "/".join(log_dir.parts[-3:])
    errors = list(t.errors) if t is not None else []
    if entry.error and entry.error not in errors:
        errors.append(entry.error)
    return {
        "key": entry.key, "task": entry.task, "attempt": entry.attempt, "category": entry.category,
        "facts": facts, "errors": [cut(e, 4000) for e in errors],
        "prompt": cut(entry.prompt or (t.problem_statement if t is not None else "")),
        "calls": model_calls(t, images) if t is not None else [],
        "steps": steps(evidence, log_dir, shots), "evidence": evidence_view(evidence),
        "grading": grading(entry, outcome, log_dir), "judge": entry.judge,
    }


__all__ = ["episode_detail", "evidence_view", "model_calls", "steps"]
