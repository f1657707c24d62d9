"""The control of the recipe's claim: demonstrations whose turns are shuffled between tasks.

Each demonstration keeps its own task (system prompt and user prompt) and gets the rest of another
task's demonstration of the same template: its tool calls, their results and its final answer,
call by call. The format, the harness, the tools and the amount of data are the same; only the link
between a task and what is done about it is gone. A student trained on these and one trained on
the real demonstrations differ only in that link, so the gap between them is the demonstrations'.

An agent that renders its whole prompt again on every call (orchard's web agent: the task, the
actions so far and the page, in one user message) has no conversation to keep apart from its
task: there each of the donor's calls, the first included, keeps its own prompt (its page, its
actions so far) with the donor's task statement replaced by the recipient's. (Giving every call
the recipient's first prompt, as a conversation's head is given, left the web control one home
page answered by three different actions.) Which kind a demonstration is, is decided once for it:
every one of its calls is a task and nothing else, and they differ (two or more prompts). A
conversation whose harness repeated its first call (a retry) stays a conversation.

The donor is a derangement within each template (task ids `<template>-<seed>`), seeded; a template
with a single demonstration keeps it as it is (counted in `unshuffled`).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from orchard_cli.conversation import conversation
from orchard_cli.errors import UsageError
from orchard_cli.records import JsonlWriter
from orchard_cli.trajectory import Trajectory, read_trajectories

CONTROL_FORMAT = 3
"""How the control is made (in the control stage's inputs, so a recipe resumed after a change
trains it again); 2: an agent's own prompt on every call keeps its page (web); 3: its first call
too, and the kind is decided per demonstration (a retried first call stays a conversation)."""


def template_of(task_id: str) -> str:
    return task_id.rsplit("-", 1)[0]


def _head(messages: list[dict[str, Any]]) -> int:
    """How many leading messages are the task (system messages and the first user message)."""
    for i, message in enumerate(messages):
        if message.get("role") == "user":
            return i + 1
    return 0


def _swap(own: list[dict[str, Any]], donor: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`donor`'s conversation with its task (leading system/user messages) replaced by `own`'s."""
    return own[:_head(own)] + donor[_head(donor):]


def _retask(messages: list[dict[str, Any]], theirs: str, ours: str, task_id: str) -> list[dict[str, Any]]:
    """`messages` (one call's whole prompt) with the task statement `theirs` replaced by `ours`."""
    if not theirs or not any(isinstance(m.get("content"), str) and theirs in m["content"] for m in messages):
        raise UsageError(f"the shuffled control cannot find {task_id}'s task statement in its prompt",
                         hint="its harness renders the task some other way; run the recipe without --control")
    return [{**m, "content": m["content"].replace(theirs, ours)} if isinstance(m.get("content"), str) else m
            for m in messages]


def _rehome(recipient: Trajectory, donor: Trajectory) -> Trajectory:
    if not recipient.calls or not donor.calls:
        raise UsageError(f"the shuffled control needs recorded calls; {recipient.task_id} or {donor.task_id} has none")
    if any(c.endpoint != "chat" for c in (*recipient.calls, *donor.calls)):
        raise UsageError("the shuffled control rewrites chat-completions calls; this harness recorded Responses calls")
    own = list((recipient.calls[0].request or {}).get("messages") or [])
    prompts = [list((call.request or {}).get("messages") or []) for call in donor.calls]
    distinct = {json.dumps(m, sort_keys=True) for m in prompts}  # a retried call is not another prompt
    whole = len(distinct) > 1 and all(_head(m) == len(m) for m in prompts)  # a prompt of its own on every call
    calls = []
    for call, theirs in zip(donor.calls, prompts):
        if whole:
            theirs = _retask(theirs, donor.problem_statement, recipient.problem_statement, donor.task_id)
        else:
            theirs = _swap(own, theirs)
        calls.append(call.model_copy(update={"request": {**(call.request or {}), "messages": theirs},
                                             "upstream_request": None, "prompt_token_ids": None,
                                             "completion_token_ids": None, "episode": recipient.episode_id}))
    if whole:  # the conversation of the rewritten calls (its main call's prompt and answer)
        messages, _ = conversation(calls)
    else:
        messages = _swap(recipient.messages, donor.messages)
    return recipient.model_copy(update={
        "calls": calls, "messages": messages,
        "metadata": {**recipient.metadata, "control": "shuffled", "donor_task": donor.task_id}})


def shuffle_demonstrations(source: Path, out: Path, seed: int = 0) -> dict[str, Any]:
    """Write `out`: every resolved demonstration of `source`, its turns taken from another task of
    its template. Returns what was done."""
    demos = [t for t in read_trajectories(source) if t.outcome.resolved]
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for demo in demos:
        groups[template_of(demo.task_id)].append(demo)
    rng = random.Random(seed)
    written, unshuffled = 0, 0
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    writer = JsonlWriter(out)
    try:
        for name in sorted(groups):
            group = sorted(groups[name], key=lambda t: t.task_id)
            if len(group) < 2:
                unshuffled += len(group)
                for demo in group:
                    writer.write(demo)
                    written += 1
                continue
            order = list(range(len(group)))
            rng.shuffle(order)
            donors = order[1:] + order[:1]  # a cycle over a shuffled order: nobody keeps their own
            for i, j in zip(order, donors):
                writer.write(_rehome(group[i], group[j]))
                written += 1
    finally:
        writer.close()
    return {"demonstrations": written, "templates": len(groups), "unshuffled": unshuffled}
