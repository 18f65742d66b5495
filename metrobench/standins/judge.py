"""A judge stand-in for a try-out: the OpenAI chat wire format, a fixed grade per prompt, no model.

``metrobench serve-standin judge`` serves it on 127.0.0.1 so that the Tier-2 path (``score
--judge openai``, the judge cache, the composite) can be tried without a key or a network.
Every reply is ``Score: N | ...`` with N the SHA-256 of the rubric prompt modulo 3: the same
prompt always gets the same grade (a rescore is reproducible, the cache is exercised), and the
grade says nothing about the answer. It is a plumbing check, never a judgment; the rehearsal
and the tests use their own stand-ins (:mod:`metrobench.rehearsal`, ``tests/fake_*.py``).
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Any

from metrobench.standins.openai_api import FakeOpenAI, chat_payload

MODEL = "standin"
REASON = "stand-in judge: a digest of the prompt, not a judgment"


def grade(prompt: str) -> int:
    """The stand-in's grade of ``prompt``: 0, 1 or 2, from its digest."""
    return hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).digest()[0] % 3


def reply(request: dict) -> tuple[int, Any]:
    """One chat completion: the grade of the request's last user message."""
    messages = request["body"].get("messages") or []
    prompt = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    if not isinstance(prompt, str):
        return 400, {"error": {"message": "the judge stand-in needs a user message with text content"}}
    return 200, chat_payload(f"Score: {grade(prompt)} | {REASON}", prompt_tokens=len(prompt) // 4,
                             completion_tokens=12)


class JudgeStandin(FakeOpenAI):
    """The stand-in's server; it keeps only its last 100 requests (it may serve a whole study)."""

    def __init__(self, port: int = 0) -> None:
        super().__init__(reply, port)
        self.requests = deque(maxlen=100)  # type: ignore[assignment]
