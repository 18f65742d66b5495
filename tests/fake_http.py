"""The tests' JSON-over-HTTP server: :mod:`metrobench.standins.json_server` (shared with the rehearsal)."""

from metrobench.standins.json_server import FakeJSONServer

__all__ = ["FakeJSONServer"]
