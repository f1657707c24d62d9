"""Completion: the assistant asked at least one question."""

from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class TripGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        return DimensionScores(completion=1.0 if "?" in self.final_text(messages) else 0.0, robustness=1.0)
