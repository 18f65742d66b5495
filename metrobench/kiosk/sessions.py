"""The tool sessions of one replay or one tool server: one per case id, made on first use.

Both ``metrobench tool`` (replaying calls from a file) and ``metrobench
serve-tools`` (the tools over HTTP) keep their state here, so they agree on
what a case id means:

* no case id, or ``"_default"``: the default session, of the default system;
* a case id that names no benchmark case: as in the reference tool server, a
  session of the default system with no case context (no disruptions, no
  current time) that ``set_disruptions`` can fill;
* a case id that names a benchmark case: with ``case_context`` (replay, which
  checks tool fidelity against the runner) a session set up exactly as the
  runner sets that case up (its disruptions and current time), and an error if
  the case belongs to another system; without it (the HTTP server, which
  mirrors the reference's server and knows no cases) a plain session as above.

``set_disruptions`` with another system than the session's opens a fresh
session of that system (its route cache must not carry routes of another
network). A lock makes the store safe for the server's worker threads.
"""

from __future__ import annotations

import threading
from typing import Any

from metrobench.data.loader import Benchmark
from metrobench.errors import MetrobenchError
from metrobench.kiosk.tools.session import ToolSession

DEFAULT_SESSION = "_default"


class SessionStore:
    """Per-case tool sessions over one default system."""

    def __init__(self, bench: Benchmark, system: str, *, case_context: bool = False) -> None:
        bench.system(system)  # an unknown system fails here, not on the first call
        self.bench = bench
        self.system = system
        self.case_context = case_context
        self._sessions: dict[str, ToolSession] = {}
        self._lock = threading.Lock()

    def get(self, case_id: str | None) -> ToolSession:
        """The session of ``case_id`` (``None``: the default one), made on first use."""
        key = case_id or DEFAULT_SESSION
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = self._new(key)
            return session

    def set_disruptions(self, case_id: str | None, system: str | None, disruptions: list[Any]) -> None:
        """The reference's ``set_disruptions``: a case's disruptions (and, optionally, its system)."""
        key = case_id or DEFAULT_SESSION
        with self._lock:
            session = self._sessions.get(key) or self._new(key)
            if system and session.system.name != system:
                session = ToolSession(self.bench.system(system), case_id=session.case_id)
            self._sessions[key] = session
        session.set_disruptions(disruptions)

    def _new(self, key: str) -> ToolSession:
        case_id = None if key == DEFAULT_SESSION else key
        data = self.bench.system(self.system)
        case = self.bench.find_case(case_id) if case_id and self.case_context else None
        if case is None:
            return ToolSession(data, case_id=case_id)
        if case.system != self.system:
            raise MetrobenchError(f"case {case_id} belongs to {case.system}, not {self.system}")
        return ToolSession.for_case(data, case)
