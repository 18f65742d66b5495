"""The tests' OpenAI/Azure/Responses stand-in: :mod:`metrobench.standins.openai_api` (shared with the rehearsal)."""

from metrobench.standins.openai_api import FakeOpenAI, chat_payload, responses_payload, tool_call

__all__ = ["FakeOpenAI", "chat_payload", "responses_payload", "tool_call"]
