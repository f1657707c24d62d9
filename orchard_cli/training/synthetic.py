"""Synthetic trajectories shaped like the proxy records them, for tests and the training benchmark.

Each episode is a bash-agent session on a small repository task: a system prompt, the task, then
calls in which the model runs shell commands through a `bash` tool and reads their output, and a
final answer. Every call is a `CallRecord` of the chat dialect whose request holds the whole
conversation so far (as harnesses send it) and whose response is a `chat.completion`. Content is
deterministic for a seed, with lengths that vary like real tool output does.
"""

from __future__ import annotations

import json
import random
from typing import Any

from orchard_cli.proxy.calls import CallRecord, CallTiming, CallUsage
from orchard_cli.trajectory import Trajectory, TrajectoryOutcome, episode_key

SYSTEM = ("You are a careful software engineer working in a git repository at /testbed. Use the bash "
          "tool to inspect files, run tests and edit code. Make the smallest change that fixes the "
          "issue, check it with the tests, then reply with a short summary and no tool call.")
BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Run a bash command in the repository and return its output.",
    "parameters": {"type": "object", "required": ["command"],
                   "properties": {"command": {"type": "string", "description": "the command to run"}}}}}
_WORDS = ("value", "total", "items", "result", "parse", "config", "buffer", "offset", "count", "index",
          "token", "record", "format", "limit", "cache", "path", "name", "state", "error", "default")


def _code(rng: random.Random, lines: int) -> str:
    out = []
    for n in range(lines):
        a, b = rng.sample(_WORDS, 2)
        out.append(f"{n + 1:4d}  {'    ' * rng.randint(0, 2)}{a}_{b} = {rng.choice(_WORDS)}({b}, {rng.randint(0, 99)})")
    return "\n".join(out)


def _steps(rng: random.Random, module: str, func: str, n: int) -> list[tuple[str, str, str]]:
    """(thought, command, output) for each tool call of an episode."""
    steps = [
        ("Let me look at the repository layout first.", "ls -R | head -40",
         "\n".join(f"./{module}/{w}.py" for w in rng.sample(_WORDS, 8))),
        (f"The issue mentions {func}; let me find it.", f"grep -rn 'def {func}' {module}",
         f"{module}/core.py:{rng.randint(10, 90)}:def {func}(items, limit=None):"),
        ("I will read the function.", f"sed -n 1,{20 + n * 3}p {module}/core.py", _code(rng, 12 + rng.randint(0, 20))),
        ("Let me run the failing test.", f"python -m pytest -q tests/test_{func}.py",
         f"F.\n____ test_{func}_limit ____\nassert {func}([1, 2, 3], limit=2) == [1, 2]\n"
         f"E   assert [1, 2, 3] == [1, 2]\n1 failed, 1 passed in 0.0{rng.randint(1, 9)}s"),
        ("The limit is ignored. I will apply it before returning.",
         f"sed -i 's/return items$/return items[:limit] if limit is not None else items/' {module}/core.py && git diff",
         f"--- a/{module}/core.py\n+++ b/{module}/core.py\n@@\n-    return items\n"
         "+    return items[:limit] if limit is not None else items"),
        ("Now the tests again.", "python -m pytest -q", f"{rng.randint(5, 40)} passed in 0.{rng.randint(10, 99)}s"),
    ]
    extra = [(f"Let me also check how {w} is used.", f"grep -rn {w} {module} | head -5", _code(rng, rng.randint(2, 8)))
             for w in rng.sample(_WORDS, max(0, n - len(steps)))]
    return (steps[:3] + extra + steps[3:])[:max(n, 1)]


def _completion(message: dict[str, Any], finish: str, usage: dict[str, int]) -> dict[str, Any]:
    return {"id": "chatcmpl-synthetic", "object": "chat.completion", "created": 0, "model": "teacher",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


def synthetic_trajectory(seed: int, *, calls: int = 4, suite: str = "synthetic", task_id: str | None = None,
                         teacher: str = "teacher", harness: str = "bash", resolved: bool = True) -> Trajectory:
    """One episode of `calls` model calls (calls - 1 tool calls and a final answer)."""
    rng = random.Random(seed)
    module, func = rng.choice(("calc", "textkit", "gridlib", "shelf")), rng.choice(("take", "clip", "head"))
    task_id = task_id or f"acme__{module}-{seed}"
    issue = (f"{func}() ignores its limit argument.\n\nCalling `{func}([1, 2, 3], limit=2)` returns all "
             f"three items; it should return the first two. Please fix {module}.{func}.")
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": issue}]
    episode = episode_key(suite, task_id, harness, teacher, 0)
    records = []
    steps = _steps(rng, module, func, calls - 1) if calls > 1 else []
    for seq in range(calls):
        request = {"model": teacher, "messages": [dict(m) for m in messages], "tools": [BASH_TOOL]}
        if seq >= len(steps):
            answer = {"role": "assistant", "content": f"Fixed: {func}() now applies `limit` before returning; "
                                                      "the tests pass."}
            finish = "stop"
        else:
            thought, command, output = steps[seq]
            call_id = f"call_{seed}_{seq}"
            answer = {"role": "assistant", "content": thought, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}
            finish = "tool_calls"
        prompt_len = sum(len(str(m.get("content") or "")) for m in messages) // 4
        usage = {"prompt_tokens": prompt_len, "completion_tokens": 30, "total_tokens": prompt_len + 30}
        records.append(CallRecord(
            id=f"c{seed}-{seq}", episode=episode, seq=seq, endpoint="chat", upstream_endpoint="chat",
            model=teacher, status=200, request=request, response=_completion(answer, finish, usage),
            usage=CallUsage(input_tokens=prompt_len, output_tokens=30, total_tokens=prompt_len + 30),
            attempts=1, timing=CallTiming(started_at=1.7e9 + seq, first_byte_ms=5.0, ended_ms=50.0)))
        messages.append(answer)
        if finish == "tool_calls":
            messages.append({"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": output})
    outcome = TrajectoryOutcome(resolved=resolved, category="resolved" if resolved else "unresolved",
                                reward=1.0 if resolved else 0.0)
    return Trajectory(episode_id=episode, task_id=task_id, suite=suite, harness=harness, model=teacher,
                      problem_statement=issue, calls=records, messages=messages, tools=[BASH_TOOL],
                      outcome=outcome, patch="", duration_seconds=1.0)


def synthetic_trajectories(count: int, *, calls: int = 4, seed: int = 0, **options: Any) -> list[Trajectory]:
    return [synthetic_trajectory(seed + i, calls=calls, **options) for i in range(count)]
