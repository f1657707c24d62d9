"""Completion is the judge's score of the final answer."""

from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class JudgedSummaryGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        scores = DimensionScores(robustness=self.robustness(dispatches))
        scores.completion = judge.evaluate(f"Rate 0-1: {task.judge_rubric}\n\n{self.final_text(messages)}") if judge else 0.0
        return scores
