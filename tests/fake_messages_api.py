"""The tests' Anthropic Messages stand-in: :mod:`metrobench.standins.messages_api` (shared with the rehearsal)."""

from metrobench.standins.messages_api import ERROR_TYPES, FakeMessagesAPI

__all__ = ["ERROR_TYPES", "FakeMessagesAPI"]
