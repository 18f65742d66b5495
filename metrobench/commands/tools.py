"""The kiosk tools by hand: ``tool`` (replay calls from a file) and ``serve-tools`` (HTTP).

Contract: ``tool`` writes one JSON answer per line of its calls file to stdout,
in order; ``serve-tools`` serves one system's tools until interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from metrobench.commands.common import Subparsers, add_data, open_bench, port_number
from metrobench.errors import MetrobenchError


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    for add in (_add_tool, _add_serve_tools):
        add(sub)


def _add_tool(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tool", help="replay tool calls from a JSONL file, one JSON answer per line")
    p.add_argument("calls", metavar="CALLS.jsonl",
                   help='one call per line: {"tool": NAME, "args": {...}, "case_id": ID (optional)}')
    add_data(p)
    p.add_argument("--system", required=True)
    p.set_defaults(func=cmd_tool)


def cmd_tool(args: argparse.Namespace) -> int:
    from metrobench.agents.runner.replies import clean
    from metrobench.kiosk.replay import replay_file

    bench = open_bench(args.data)
    path = Path(args.calls)
    if not path.is_file():
        raise MetrobenchError(f"{path}: no such file")
    out = sys.stdout
    for record in replay_file(bench, args.system, path):
        # a lone surrogate in a call's arguments (JSON carries it, UTF-8 cannot): U+FFFD, as the runner records it
        out.write(json.dumps(clean(record), ensure_ascii=False) + "\n")
    return 0


def _add_serve_tools(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve-tools", help="serve the tools over HTTP on 127.0.0.1")
    add_data(p)
    p.add_argument("--system", required=True)
    p.add_argument("--port", type=port_number, default=8100)
    p.add_argument("--host", default="127.0.0.1")
    p.set_defaults(func=cmd_serve_tools)


def cmd_serve_tools(args: argparse.Namespace) -> int:
    from metrobench.kiosk.server import serve

    serve(open_bench(args.data), args.system, args.port, host=args.host)
    return 0
