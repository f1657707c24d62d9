"""ATIF, the trajectory format Harbor-based tools exchange: orchard's episodes out, and back in.

orchard writes ATIF-v1.4 (Harbor's RFC 0001, "Agent Trajectory Interchange Format"): a
`Trajectory` of numbered `Step`s, each from the system, the user or the agent; an agent step
carries its message, its reasoning, its tool calls, the observations they produced and, where the
recording proxy kept them, the call's metrics (token counts, token ids, log-probabilities). It
reads every version up to v1.6: v1.5 and v1.6 add content parts (`{"type": "text", "text"}`,
`{"type": "image", "source"}`) as a message or an observation's content, `llm_call_count` and
`is_copied_context` on a step; text parts are read as their text, an image is refused by name
(orchard's chat messages carry text). A later version (v1.7: embedded subagent trajectories, a
`trajectory_id`) is refused by name.

The models below re-express the schema from its documentation (field names, which fields only an
agent step may carry, step ids 1, 2, 3 ..., observation results naming a tool call of their own
step); they are orchard's own code. `from_episode` builds one from a recorded conversation;
`to_messages` turns one back into the chat messages training reads.

A leaf of the core: it reads `CallRecord`s and never imports tasks or harnesses.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchard_cli.proxy.calls import CallRecord

ATIF_VERSION = "ATIF-v1.4"
READABLE = ("ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4", "ATIF-v1.5", "ATIF-v1.6")
Version = Literal["ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4", "ATIF-v1.5", "ATIF-v1.6"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Agent(_Model):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    """The tools the agent had, in OpenAI function-calling form."""
    extra: dict[str, Any] | None = None


class ToolCall(_Model):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ObservationResult(_Model):
    source_call_id: str | None = None
    """The tool call (of the same step) this is the result of; None for other feedback."""
    content: str | list[dict[str, Any]] | None = None
    subagent_trajectory_ref: list[dict[str, Any]] | None = None


class Observation(_Model):
    results: list[ObservationResult]


class Metrics(_Model):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class Step(_Model):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[dict[str, Any]]
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    llm_call_count: int | None = Field(None, ge=0)
    """v1.5+: how many model calls this step stands for (0: none, e.g. a dispatch)."""
    is_copied_context: bool | None = None
    """v1.5+: the step was copied from an earlier trajectory as context (kept as a message)."""
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_only(self) -> "Step":
        if self.source != "agent":
            held = [f for f in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")
                    if getattr(self, f) is not None]
            if held:
                raise ValueError(f"step {self.step_id}: only agent steps carry {held[0]}")
        ids = {c.tool_call_id for c in self.tool_calls or ()}
        for result in (self.observation.results if self.observation else ()):
            if result.source_call_id is not None and result.source_call_id not in ids:
                raise ValueError(f"step {self.step_id}: observation names tool call {result.source_call_id!r}, "
                                 "which this step did not make")
        return self


class FinalMetrics(_Model):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class Trajectory(_Model):
    schema_version: Version = ATIF_VERSION
    session_id: str
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _numbered(self) -> "Trajectory":
        for i, step in enumerate(self.steps, 1):
            if step.step_id != i:
                raise ValueError(f"steps[{i - 1}].step_id is {step.step_id}, expected {i} (numbered from 1)")
        return self

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


# ---- orchard -> ATIF --------------------------------------------------------------------------

def _stamp(seconds: float | None) -> str | None:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat() if seconds else None


def _arguments(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def _metrics(call: CallRecord) -> Metrics:
    usage = call.usage
    return Metrics(prompt_tokens=usage.input_tokens if usage else None,
                   completion_tokens=usage.output_tokens if usage else None,
                   cached_tokens=usage.cached_tokens if usage else None,
                   prompt_token_ids=call.prompt_token_ids, completion_token_ids=call.completion_token_ids,
                   logprobs=call.logprobs)


def _text(content: Any) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    return content if isinstance(content, (str, list)) else str(content)


def from_episode(*, session_id: str, agent: str, agent_version: str | None, model: str | None,
                 messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                 calls: list[CallRecord] | None = None, extra: dict[str, Any] | None = None,
                 started_at: float | None = None) -> Trajectory:
    """An episode's conversation (chat messages, as `orchard_cli.conversation` normalises them)
    as an ATIF trajectory. The k-th assistant message gets the k-th successful call's metrics
    when the counts agree (the recorded token ids belong to that call); else none is guessed."""
    ok = [c for c in calls or () if c.error is None and c.status == 200 and c.response is not None]
    answers = sum(1 for m in messages if m.get("role") == "assistant")
    per_answer = ok if len(ok) == answers else []
    steps: list[Step] = []
    agent_index = 0
    for message in messages or [{"role": "user", "content": ""}]:
        role = message.get("role")
        if role == "tool":
            last = steps[-1] if steps and steps[-1].source == "agent" else None
            known = {c.tool_call_id for c in (last.tool_calls or ())} if last else set()
            call_id = message.get("tool_call_id")
            result = ObservationResult(source_call_id=call_id if call_id in known else None,
                                       content=_text(message.get("content")))
            if last is None:
                steps.append(Step(step_id=len(steps) + 1, source="user", message=_text(message.get("content")),
                                  extra={"role": "tool"}))
                continue
            if last.observation is None:
                last.observation = Observation(results=[])
            last.observation.results.append(result)
            continue
        if role == "assistant":
            call = per_answer[agent_index] if agent_index < len(per_answer) else None
            agent_index += 1
            tool_calls = [ToolCall(tool_call_id=str(tc.get("id") or f"call_{agent_index}_{i}"),
                                   function_name=str((tc.get("function") or {}).get("name") or ""),
                                   arguments=_arguments((tc.get("function") or {}).get("arguments")))
                          for i, tc in enumerate(message.get("tool_calls") or ())]
            steps.append(Step(step_id=len(steps) + 1, source="agent", model_name=(call.model if call else None) or model,
                              message=_text(message.get("content")), tool_calls=tool_calls or None,
                              reasoning_content=message.get("reasoning_content") or None,
                              timestamp=_stamp(call.timing.started_at) if call and call.timing else None,
                              metrics=_metrics(call) if call else None))
            continue
        source = "system" if role in ("system", "developer") else "user"
        steps.append(Step(step_id=len(steps) + 1, source=source, message=_text(message.get("content")),
                          timestamp=_stamp(started_at) if not steps else None))
    used = [c.usage for c in ok if c.usage is not None]
    final = FinalMetrics(total_prompt_tokens=sum(u.input_tokens for u in used) if used else None,
                         total_completion_tokens=sum(u.output_tokens for u in used) if used else None,
                         total_steps=len(steps))
    return Trajectory(session_id=session_id, agent=Agent(name=agent, version=agent_version or "unknown",
                                                         model_name=model, tool_definitions=tools or None),
                      steps=steps, final_metrics=final, extra=extra)


# ---- ATIF -> orchard --------------------------------------------------------------------------

def _plain(content: Any, where: str) -> Any:
    """A list of content parts (v1.5+) as its text; ValueError naming `where` for an image or a
    part of a kind ATIF does not define. Lists of another shape (v1.4 and earlier) stay as they are."""
    if not isinstance(content, list) or not all(isinstance(p, dict) and "type" in p for p in content):
        return content
    texts = []
    for part in content:
        if part["type"] == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part["type"] == "image":
            raise ValueError(f"{where} holds an image content part (ATIF-v1.5 multimodal content), "
                             "which orchard's chat messages do not carry")
        else:
            raise ValueError(f"{where} holds a content part of type {part['type']!r} without text")
    return "".join(texts)


def to_messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The chat messages an ATIF trajectory holds (system, user, assistant with tool_calls, tool).
    ValueError, naming the step, for content a chat message cannot carry (an image)."""
    messages: list[dict[str, Any]] = []
    for step in trajectory.steps:
        where = f"step {step.step_id}"
        if step.source != "agent":
            role = "tool" if (step.extra or {}).get("role") == "tool" else step.source
            messages.append({"role": role, "content": _plain(step.message, where)})
            continue
        answer: dict[str, Any] = {"role": "assistant", "content": _plain(step.message, where)}
        if step.reasoning_content:
            answer["reasoning_content"] = step.reasoning_content
        if step.tool_calls:
            answer["tool_calls"] = [{"id": c.tool_call_id, "type": "function",
                                     "function": {"name": c.function_name, "arguments": json.dumps(c.arguments)}}
                                    for c in step.tool_calls]
        messages.append(answer)
        for result in (step.observation.results if step.observation else ()):
            content = _plain(result.content, f"{where}'s observation") if result.content is not None else ""
            if result.source_call_id is not None:
                messages.append({"role": "tool", "tool_call_id": result.source_call_id, "content": content})
            else:
                messages.append({"role": "user", "content": content})
    return messages


def is_atif(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("schema_version", "")).startswith("ATIF-")
