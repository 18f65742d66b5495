"""``metrobench doctor``: what the pipeline will use on this machine, and what is wrong.

Contract: reads the study config (default ``config/config.yaml``) and reports;
it changes nothing. The exit status is :func:`metrobench.doctor.main`'s.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from metrobench.commands.common import Subparsers, add_data


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="what the pipeline will use on this machine, and what is wrong")
    add_data(p)
    p.add_argument("--config", action="append", default=None, metavar="FILE",
                   help="study config (repeatable; default: config/config.yaml)")
    p.add_argument("--results", default="results", help="the results folder (for free disk)")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from metrobench import doctor

    return doctor.main(args.config or ["config/config.yaml"], data=args.data, results=Path(args.results))
