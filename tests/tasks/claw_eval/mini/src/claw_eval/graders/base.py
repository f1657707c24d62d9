"""Base class of task graders, with the two helpers the test graders use."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class AbstractGrader(ABC):
    @abstractmethod
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None,
              env_snapshot=None) -> Any:
        ...

    @staticmethod
    def final_text(messages) -> str:
        for item in reversed(messages):
            if item.message.role == "assistant" and item.message.text.strip():
                return item.message.text
        return ""

    @staticmethod
    def robustness(dispatches) -> float:
        failed = {d.tool_name for d in dispatches if d.response_status >= 400}
        if not failed:
            return 1.0
        later_ok = {d.tool_name for d in dispatches if d.response_status < 400}
        return round(len(failed & later_ok) / len(failed), 2)
