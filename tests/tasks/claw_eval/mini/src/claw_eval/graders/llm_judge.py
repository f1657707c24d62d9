"""A judge over any OpenAI-compatible endpoint (plain HTTP, so the tests need no client library)."""

from __future__ import annotations

import httpx


class LLMJudge:
    def __init__(self, model_id: str, api_key: str | None = None, base_url: str = "") -> None:
        self.model_id, self.api_key, self.base_url = model_id, api_key or "none", base_url.rstrip("/")
        self.calls: list[dict] = []

    def evaluate(self, question: str) -> float:
        reply = httpx.post(f"{self.base_url}/chat/completions", timeout=30,
                           headers={"Authorization": f"Bearer {self.api_key}"},
                           json={"model": self.model_id, "messages": [{"role": "user", "content": question}]})
        text = reply.json()["choices"][0]["message"]["content"]
        self.calls.append({"question": question, "answer": text})
        try:
            return max(0.0, min(1.0, float(text.strip())))
        except ValueError:
            return 0.0

    def get_call_log(self) -> list[dict]:
        return list(self.calls)
