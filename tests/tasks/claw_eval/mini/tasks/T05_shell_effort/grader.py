"""Completion: the answer names the gym and 4417, and the agent used its sandbox: at least two
successful `Bash` calls (counted as Claw-Eval's T068zh and T070zh graders count them)."""

from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class ShellEffortGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        scores = DimensionScores(robustness=self.robustness(dispatches))
        text = self.final_text(messages)
        sandbox_calls = len([d for d in dispatches if d.tool_name == "Bash" and d.response_status < 400])
        parts = ["Riverside" in text and "4417" in text, sandbox_calls >= 2]
        scores.completion = round(sum(parts) / len(parts), 4)
        return scores
