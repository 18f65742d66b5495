"""Replaying tool calls from a JSONL file (``metrobench tool``): how tool fidelity is checked.

Each input line is ``{"tool": NAME, "args": {...}, "case_id": ID?}``. Calls with the
same case id share one session set up exactly as the runner sets up that case
(its disruptions and current time); calls without one share a default session.
A ``set_disruptions`` line, with the reference endpoint's body
(``{"case_id"?, "system"?, "disruptions": [...]}``), sets a session's
disruptions explicitly. Each output line is ``{"tool", "args", "status", "body"}``.

As in the reference tool server, any ``case_id`` is accepted: one that names
no benchmark case is simply a session with no case context (the default
system, no disruptions, no current time), which ``set_disruptions`` can fill.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from metrobench.data.loader import Benchmark
from metrobench.errors import MetrobenchError, not_utf8
from metrobench.tools import ToolSession, call_tool

DEFAULT = "_default"


class Replayer:
    """Holds the sessions of one replay."""

    def __init__(self, bench: Benchmark, system: str) -> None:
        self.bench = bench
        self.system = system
        self.sessions: dict[str, ToolSession] = {}
        bench.system(system)

    def session(self, case_id: str | None) -> ToolSession:
        key = case_id or DEFAULT
        if key not in self.sessions:
            system = self.bench.system(self.system)
            case = self.bench.find_case(case_id) if case_id else None
            if case is not None:
                if case.system != self.system:
                    raise MetrobenchError(f"case {case_id} belongs to {case.system}, not {self.system}")
                self.sessions[key] = ToolSession.for_case(system, case)
            else:
                self.sessions[key] = ToolSession(system, case_id=case_id or None)
        return self.sessions[key]

    def call(self, tool: str, args: dict[str, Any], case_id: str | None) -> dict[str, Any]:
        if tool == "set_disruptions":
            target = case_id or args.get("case_id") or None
            session = self.session(None if target == DEFAULT else target)
            if args.get("system") and args["system"] != session.system.name:
                session.system = self.bench.system(args["system"])
            session.set_disruptions(args.get("disruptions", []))
            return {"tool": tool, "args": args, "status": 200, "body": {"ok": True}}
        answer = call_tool(self.session(case_id), tool, args)
        return {"tool": tool, "args": args, "status": answer.status, "body": answer.body}


def parse_calls(lines: Iterable[str], source: str) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """Yield (tool, args, case_id) per non-blank line, with errors naming file and line."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except RecursionError:
            raise MetrobenchError(f"{source}: line {number}: invalid JSON: nested too deeply") from None
        except json.JSONDecodeError as exc:
            raise MetrobenchError(f"{source}: line {number}: invalid JSON: {exc.msg}") from None
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
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise MetrobenchError(f"{path}: {not_utf8(exc)}") from None
    for tool, args, case_id in parse_calls(text.split("\n"), str(path)):
        yield replayer.call(tool, args, case_id)
