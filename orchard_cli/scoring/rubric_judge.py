"""An optional LLM judge: any OpenAI-compatible chat endpoint scores an episode against a rubric.

Its score is reported beside the verdict (`results.jsonl` `judge`, the scorecard's `judge_mean`
and how often the judge agrees with the checks), never inside it: the checks decide what passed.
The judge reads the task as the agent got it and the evidence (final answer, tool dispatches, the
change of the service state, the patch), cut to `MAX_EVIDENCE` characters. A judge that fails (no
answer, unreadable JSON) is recorded as an error on that row; the run goes on.

orchard is a model client here, so it uses the official `openai` package.
"""

from __future__ import annotations

import json
import os
import re

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.evidence import Evidence

MAX_EVIDENCE = 12000
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""Where the judge's key is read from when no --judge-key-env is named (none: no key sent)."""
DEFAULT_RUBRIC = "Did the agent do what the user asked, completely and correctly, and nothing harmful besides?"
SYSTEM = ("You grade the work of an AI assistant. Read the task, the rubric and what the assistant did. "
          'Reply with one JSON object and nothing else: {"score": <a number from 0 to 1>, '
          '"rationale": "<one or two sentences>"}.')


class JudgeConfig(BaseModel):
    """`--judge-model M --judge-base-url U` (the key from `--judge-key-env`, default OPENAI_API_KEY)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    base_url: str
    key_env: str | None = None
    timeout_seconds: float = Field(120.0, gt=0)


class JudgeVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    score: float | None = None
    rationale: str = ""
    error: str | None = None


def evidence_text(evidence: Evidence) -> str:
    """What the judge reads of an episode, in a few plain sections."""
    from orchard_cli.view import state_diff

    parts = []
    if evidence.dispatches:
        parts.append("Tool calls:\n" + "\n".join(
            f"{d.seq}. {d.tool} {json.dumps(d.arguments, ensure_ascii=False)} -> {d.status}"
            for d in evidence.dispatches))
    for name, state in evidence.state.items():
        if name in evidence.state_before:
            change = state_diff(name, evidence.state_before[name], state)
            parts.append(f"Changes to {name}:\n{change or '(none)'}")
    if evidence.patch:
        parts.append(f"Patch:\n{evidence.patch}")
    parts.append(f"Final answer:\n{evidence.answer or '(none)'}")
    text = "\n\n".join(parts)
    return text if len(text) <= MAX_EVIDENCE else text[:MAX_EVIDENCE] + "\n[... cut]"


def parse_verdict(text: str) -> tuple[float, str]:
    """(score, rationale) from the judge's reply: a JSON object, possibly fenced."""
    found = re.search(r"\{.*\}", text or "", re.DOTALL)
    if not found:
        raise ValueError("the judge's reply holds no JSON object")
    data = json.loads(found.group(0))
    score = float(data["score"])
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"the judge's score {score} is not between 0 and 1")
    return score, str(data.get("rationale", ""))[:1000]


class Judge:
    def __init__(self, config: JudgeConfig) -> None:
        from orchard_cli.models import normalize_base_url, read_key

        try:
            import openai
        except ImportError as exc:
            from orchard_cli.errors import MissingDependencyError

            raise MissingDependencyError("the judge needs the openai package",
                                         hint="pip install 'orchard-cli[claw]'") from exc
        self.config = config
        key = read_key(config.key_env) if config.key_env else os.environ.get(DEFAULT_KEY_ENV)
        self.client = openai.OpenAI(base_url=normalize_base_url(config.base_url), api_key=key or "none",
                                    timeout=config.timeout_seconds, max_retries=2)

    def grade(self, prompt: str, rubric: str | None, evidence: Evidence | None) -> JudgeVerdict:
        content = (f"Task given to the assistant:\n{prompt.strip()}\n\nRubric:\n{(rubric or DEFAULT_RUBRIC).strip()}"
                   f"\n\nWhat the assistant did:\n{evidence_text(evidence or Evidence())}")
        try:
            reply = self.client.chat.completions.create(
                model=self.config.model, temperature=0,
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}])
            score, rationale = parse_verdict(reply.choices[0].message.content or "")
        except Exception as exc:  # noqa: BLE001 - a judge failure is recorded, never raised
            return JudgeVerdict(model=self.config.model, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return JudgeVerdict(model=self.config.model, score=score, rationale=rationale)
