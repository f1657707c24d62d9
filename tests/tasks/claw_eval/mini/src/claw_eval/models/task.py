"""The task file model (the fields orchard's tests use), in Claw-Eval's layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field


class Prompt(BaseModel):
    text: str
    language: str = "en"
    attachments: list[str] = Field(default_factory=list)


class Tool(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any] = Field(default_factory=dict)


class Endpoint(BaseModel):
    tool_name: str
    url: str
    method: str = "POST"


class Service(BaseModel):
    name: str
    command: str
    port: int
    health_check: str
    health_check_method: str = "POST"
    ready_timeout: int = 10
    reset_endpoint: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


class Environment(BaseModel):
    timeout_seconds: int = 300
    max_turns: int = 20
    fixtures: list[str] = Field(default_factory=list)
    env_snapshot_timeout: int = 10


class UserAgent(BaseModel):
    enabled: bool = False
    persona: str = ""
    max_rounds: int = 3


class TaskDefinition(BaseModel):
    task_id: str
    task_name: str
    category: str = ""
    difficulty: str = "easy"
    prompt: Prompt
    tools: list[Tool] = Field(default_factory=list)
    tool_endpoints: list[Endpoint] = Field(default_factory=list)
    environment: Environment = Field(default_factory=Environment)
    services: list[Service] = Field(default_factory=list)
    judge_rubric: str = ""
    reference_solution: str = ""
    user_agent: UserAgent = Field(default_factory=UserAgent)
    sandbox_files: list[str] = Field(default_factory=list)
    sandbox_grader_files: list[str] = Field(default_factory=list)
    env_snapshot_files: list[str] = Field(default_factory=list)
    env_snapshot_commands: list[str] = Field(default_factory=list)
    local_grader_files: list[str] = Field(default_factory=list)
    task_file: str | None = Field(default=None, exclude=True)

    @classmethod
    def from_yaml(cls, path: str | Path) -> "TaskDefinition":
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        data["task_file"] = str(Path(path).resolve())
        return cls.model_validate(data)
