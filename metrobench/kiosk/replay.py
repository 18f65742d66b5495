"""Replaying tool calls from a JSONL file (``metrobench tool``): how tool fidelity is checked.

Each input line is ``{"tool": NAME, "args": {...}, "case_id": ID?}``. Calls with the
same case id share one session set up exactly as the runner sets up that case
(its disruptions and current time); calls without one share a default session.
A ``set_disruptions`` line, with the reference endpoint's body
(``{"case_id"?, "system"?, "disruptions": [...]}``), sets a session's
disruptions explicitly. Each output line is ``{"tool", "args", "status", "body"}``.

What a case id means is :mod:`metrobench.kiosk.sessions`' rule, shared with the HTTP
tool server: as in the reference tool server any ``case_id`` is accepted, and
one that names no benchmark case is a session with no case context (the default
system, no disruptions, no current time), which ``set_disruptions`` can fill.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from metrobench.data.loader import Benchmark
from metrobench.errors import MetrobenchError
from metrobench.jsonl import iter_lines, read_utf8
from metrobench.kiosk.sessions import SessionStore
from metrobench.kiosk.tools.dispatch import call_tool


class Replayer:
    """Replays calls against the sessions of one replay (set up like the runner's cases)."""

    def __init__(self, bench: Benchmark, system: str) -> None:
        self.store = SessionStore(bench, system, case_context=True)

    def call(self, tool: str, args: dict[str, Any], case_id: str | None) -> dict[str, Any]:
        if tool == "set_disruptions":
            self.store.set_disruptions(case_id or args.get("case_id") or None,
                                       args.get("system"), args.get("disruptions", []))
            return {"tool": tool, "args": args, "status": 200, "body": {"ok": True}}
        answer = call_tool(self.store.get(case_id), tool, args)
        return {"tool": tool, "args": args, "status": answer.status, "body": answer.body}


def parse_calls(text: str, source: str | Path) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """Yield (tool, args, case_id) per non-blank line, with errors naming file and line."""
    for number, item in iter_lines(text, source):
        if not isinstance(item, dict) or not isinstance(item.get("tool"), str):
            raise MetrobenchError(f"{source}: line {number}: field tool: expected a string tool name")
        args = item.get("args", {})
        if not isinstance(args, dict):
            raise MetrobenchError(f"{source}: line {number}: field args: expected a JSON object")
        case_id = item.get("case_id")
        if case_id is not None and not isinstance(case_id, str):
            raise MetrobenchError(f"{source}: line {number}: field case_id: expected a string")
        yield item["tool"], args, case_id


def replay_file(bench: Benchmark, system: str, path: Path) -> Iterator[dict[str, Any]]:
    replayer = Replayer(bench, system)
    for tool, args, case_id in parse_calls(read_utf8(path), path):
        yield replayer.call(tool, args, case_id)
