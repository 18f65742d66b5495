"""``metrobench rule-agent``: the scripted baseline (no model), one transcript per system.

Contract: runs :mod:`metrobench.rule_agent` on the selected cases of one system
and writes the whole transcript to ``--out`` (replacing it); the benchmark's
pinned digests are checked first unless ``--no-verify``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from metrobench.commands.common import Subparsers, _add_data, _add_selection, _add_verify, _systems, _verified_bench


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("rule-agent", help="run the scripted baseline, one transcript per system")
    _add_data(p)
    p.add_argument("--system", required=True, choices=_systems())
    _add_selection(p)
    p.add_argument("--model", default="rule-agent", help="model name recorded in the transcript")
    p.add_argument("--out", required=True, help="transcript to write (JSONL)")
    _add_verify(p)
    p.set_defaults(func=cmd_rule_agent)


def cmd_rule_agent(args: argparse.Namespace) -> int:
    from metrobench.rule_agent import run_cases
    from metrobench.partition import load_split, select_cases
    from metrobench.scoring.names import check_name
    from metrobench.transcript import write_transcript

    bench = _verified_bench(args)
    check_name("model", args.model)
    cases = select_cases(bench, args.system, args.partition, load_split(bench, args.split))
    records = list(run_cases(bench.system(args.system), cases, model=args.model))
    write_transcript(Path(args.out), records)
    failed = sum(1 for r in records if r.error)
    print(f"wrote {args.out}: {len(records)} cases of {args.system} ({failed} failed)")
    return 0
