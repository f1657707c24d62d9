"""Completion (as Claw-Eval's user-agent graders split it, at the last `[user_agent]` message): the
assistant asked before the user's answer, and its plan after that answer names Lisbon."""

from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class TripGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        split = max((i for i, m in enumerate(messages)
                     if m.message.role == "user" and m.message.text.startswith("[user_agent]")), default=None)
        if split is None:
            return DimensionScores(completion=0.0, robustness=1.0)
        asked = any(m.message.role == "assistant" and "?" in m.message.text for m in messages[:split])
        after = " ".join(m.message.text for m in messages[split:] if m.message.role == "assistant")
        return DimensionScores(completion=(0.5 * asked + 0.5 * ("Lisbon" in after)), robustness=1.0)
