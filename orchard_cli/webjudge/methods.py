"""The judging methods. Each reads a `JudgedEpisode` and asks the judge model (any
OpenAI-compatible vision endpoint, through the official `openai` package) for a verdict.

- `webvoyager` (WebVoyager's auto-eval): one call with the task, the agent's final answer and the
  last `last_images` screenshots; the reply ends with SUCCESS or NOT SUCCESS.
- `webjudge` (Online-Mind2Web's WebJudge): 1) the key points the task requires, 2) each
  screenshot scored 1-5 for how much it shows evidence of those key points (with a reason), 3) a
  final call with the task, the key points, the action history and the screenshots that scored at
  least `threshold` (with their reasons); the reply ends with `Status: success` or `Status: failure`.
- `deepshop` (DeepShop's per-aspect rule): each aspect of the query the dataset names (attribute,
  filter, sort) judged apart, WebVoyager-style, on the answer and the last `last_images`
  screenshots; the task passes only if every aspect does. No final answer fails every aspect
  without a call (as DeepShop's scripts score it). A task with no aspect is judged as a whole.

The prompts are orchard's own wording of those methods; `prompt_sha256(method)` fingerprints them
for the scorecard. A reply that names no verdict is an error on that attempt, never a guess.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchard_cli.webjudge.attempts import JudgedEpisode

METHODS = ("webjudge", "webvoyager", "deepshop")
WHOLE = "task"
"""deepshop: the one 'aspect' of a task whose row names none (judged as a whole)."""
SUITE_METHOD = {"webvoyager": "webvoyager", "online-mind2web": "webjudge", "deepshop": "deepshop"}
"""Each live-web suite's own method (`orchard judge --method auto`); any other run: webjudge."""

VOYAGER_SYSTEM = (
    "You evaluate whether a web agent completed a task in a web browser. You get the task, the agent's "
    "final answer and the last screenshots of the browser. The screenshots are the evidence: trust them over "
    "the answer when they disagree, and do not assume anything they do not show. Explain briefly, then end "
    "your reply with exactly one line: SUCCESS or NOT SUCCESS.")
KEY_POINTS = (
    "Here is a task a web agent had to do in a browser:\n{task}\n\nList the key points the task requires "
    "(each constraint: what to search, filter, select, sort or enter, and what outcome is expected), one per "
    "line, without adding requirements the task does not state.")
IMAGE_SCORE = (
    "Task: {task}\nKey points:\n{key_points}\n\nThe image is one screenshot of the agent's browser during the "
    "task. How much does it show evidence needed to decide whether the key points were met (progress, a "
    "filter or selection applied, a result, a confirmation)? Describe what it shows that matters in one or two "
    "sentences, then end with one line: Score: N (1 = nothing relevant, 5 = decisive evidence).")
FINAL = (
    "You decide whether a web agent completed a task. Task: {task}\nKey points:\n{key_points}\n\nActions the "
    "agent took:\n{actions}\n\nThe agent's final answer: {answer}\n\nThe screenshots that follow are the ones "
    "judged relevant, with what each shows:\n{image_notes}\n\nThe task is completed only if every key point "
    "is met as the task states it (a filter or option the task asks for must have been applied, not merely "
    "searched for). Explain briefly, then end with one line: Status: success or Status: failure.")

ASPECT_SYSTEM = (
    "You evaluate one requirement of an online shopping task a web agent did in a browser. You get the "
    "requirement (a product attribute, a search filter or a sort order the user asked for), the agent's final "
    "answer and the last screenshots of the browser. Decide only whether this requirement was met: the "
    "screenshots are the evidence and win when the answer contradicts them; an answer's detail the screenshots "
    "do not show may be believed. Explain briefly, then end your reply with exactly one line: SUCCESS or NOT "
    "SUCCESS.")

PROMPTS = {"webvoyager": (VOYAGER_SYSTEM,), "webjudge": (KEY_POINTS, IMAGE_SCORE, FINAL), "deepshop": (ASPECT_SYSTEM,)}


def prompt_sha256(method: str) -> str:
    return hashlib.sha256("\x1f".join(PROMPTS[method]).encode()).hexdigest()


@dataclass
class Verdict:
    success: bool | None
    reasons: str = ""
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    calls: int = 0


Ask = Callable[[list[dict[str, Any]]], str]
"""Messages -> the judge's reply text."""


def image_part(path: Path) -> dict[str, Any]:
    data = base64.b64encode(path.read_bytes()).decode()
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def last_line_verdict(text: str, yes: str, no: str) -> bool | None:
    """The verdict on the reply's last non-empty line (markdown emphasis ignored; `yes` and `no`
    are regular expressions matched as whole words, `no` first), else None: never a guess from the
    reasoning above it."""
    lines = [ln.replace("*", "").replace("_", " ").strip() for ln in (text or "").splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        return None
    last = lines[-1]
    if re.search(rf"\b{no}\b", last, re.IGNORECASE):
        return False
    if re.search(rf"\b{yes}\b", last, re.IGNORECASE):
        return True
    return None


def webvoyager(ask: Ask, episode: JudgedEpisode, *, last_images: int = 3) -> Verdict:
    shots = episode.screenshots[-last_images:]
    content: list[dict[str, Any]] = [{"type": "text", "text": f"Task: {episode.task}\n\nFinal answer: "
                                                              f"{episode.answer or '(none)'}\n\n{len(shots)} "
                                                              "last screenshot(s) follow."}]
    content += [image_part(p) for p in shots]
    reply = ask([{"role": "system", "content": VOYAGER_SYSTEM}, {"role": "user", "content": content}])
    success = last_line_verdict(reply, "SUCCESS", r"NOT\s+SUCCESS")
    return Verdict(success=success, reasons=reply.strip()[-2000:], calls=1,
                   error=None if success is not None else "the judge's reply names neither SUCCESS nor NOT SUCCESS",
                   details={"screenshots": [p.name for p in shots]})


SCORE = re.compile(r"score\b[^0-9\n]{0,12}([1-5])\b", re.IGNORECASE)


def read_score(reply: str) -> int | None:
    """The last `Score: N` (1-5) of a reply; markdown emphasis and a "(1-5)" scale note ignored."""
    plain = re.sub(r"\(\s*1\s*(?:-|to)\s*5\s*\)", "", (reply or "").replace("*", ""))
    found = SCORE.findall(plain)
    return int(found[-1]) if found else None


def webjudge(ask: Ask, episode: JudgedEpisode, *, threshold: int = 3, max_images: int = 50) -> Verdict:
    key_points = ask([{"role": "user", "content": KEY_POINTS.format(task=episode.task)}]).strip()
    calls = 1
    scored = []
    shots = episode.screenshots
    if len(shots) > max_images:  # the start page, and the last pages
        shots = shots[:1] + shots[-(max_images - 1):]
    for path in shots:
        text = IMAGE_SCORE.format(task=episode.task, key_points=key_points)
        reply = ask([{"role": "user", "content": [{"type": "text", "text": text}, image_part(path)]}])
        calls += 1
        plain = (reply or "").replace("*", "")
        score = read_score(plain)
        reason = plain[:plain.lower().rfind("score")] if score is not None else plain
        scored.append({"image": path.name, "score": score, "reason": reason.strip()[-600:]})
    if scored and all(s["score"] is None for s in scored):
        return Verdict(success=None, calls=calls, details={"key_points": key_points, "image_scores": scored},
                       error="the judge scored none of the screenshots (no `Score: N` in its replies)")
    kept = [(p, s) for p, s in zip(shots, scored)
            if s["score"] is not None and s["score"] >= threshold]
    notes = "\n".join(f"{i + 1}. {s['image']}: {s['reason']}" for i, (_, s) in enumerate(kept)) or "(none)"
    text = FINAL.format(task=episode.task, key_points=key_points, answer=episode.answer or "(none)",
                        actions="\n".join(f"{i + 1}. {a}" for i, a in enumerate(episode.actions)) or "(none)",
                        image_notes=notes)
    reply = ask([{"role": "user", "content": [{"type": "text", "text": text}] + [image_part(p) for p, _ in kept]}])
    calls += 1
    success = last_line_verdict(reply, r"status\s*:\s*success", r"status\s*:\s*failure")
    return Verdict(success=success, reasons=reply.strip()[-2000:], calls=calls,
                   error=None if success is not None else "the judge's reply ends with no `Status:` line",
                   details={"key_points": key_points, "image_scores": scored, "kept": [p.name for p, _ in kept]})


def deepshop(ask: Ask, episode: JudgedEpisode, *, last_images: int = 15) -> Verdict:
    aspects = dict(episode.record.get("aspects") or {}) or {WHOLE: episode.task}
    shots = episode.screenshots[-last_images:]
    verdicts: dict[str, bool | None] = {}
    reasons: list[str] = []
    calls = 0
    for name, requirement in aspects.items():
        if not (episode.answer or "").strip():
            verdicts[name] = False
            reasons.append(f"{name}: no final answer")
            continue
        content: list[dict[str, Any]] = [{"type": "text", "text": f"Requirement: {requirement}\n\nFinal answer: "
                                                                  f"{episode.answer}\n\n{len(shots)} last screenshot(s) "
                                                                  "follow."}]
        content += [image_part(p) for p in shots]
        reply = ask([{"role": "system", "content": ASPECT_SYSTEM}, {"role": "user", "content": content}])
        calls += 1
        verdicts[name] = last_line_verdict(reply, "SUCCESS", r"NOT\s+SUCCESS")
        reasons.append(f"{name}: {reply.strip()[-600:]}")
    undecided = [n for n, v in verdicts.items() if v is None]
    success = False if False in verdicts.values() else (None if undecided else True)  # one failed aspect decides
    return Verdict(success=success, reasons="\n\n".join(reasons)[-2000:], calls=calls,
                   error=(f"the judge's reply on {undecided[0]!r} names neither SUCCESS nor NOT SUCCESS"
                          if success is None else None),
                   details={"aspects": verdicts, "screenshots": [p.name for p in shots]})


def judge(method: str, ask: Ask, episode: JudgedEpisode, *, threshold: int = 3) -> Verdict:
    try:
        if method == "webvoyager":
            return webvoyager(ask, episode)
        if method == "deepshop":
            return deepshop(ask, episode)
        return webjudge(ask, episode, threshold=threshold)
    except Exception as exc:  # noqa: BLE001 - a judge that fails is recorded on the attempt, the run goes on
        return Verdict(success=None, error=f"{type(exc).__name__}: {str(exc)[:300]}")
