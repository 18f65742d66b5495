"""``metrobench <stage>``: one command per pipeline stage, the same entry points the rules call.

User mistakes (a missing file, a malformed case, a bad argument) end with one
``metrobench: error: ...`` line and exit status 2, never a traceback: argparse's
own errors included, and any file the system refuses (a directory where a file
belongs, a read-only place such as /proc, a missing executable).

This module keeps only the entry point: :func:`build_parser` asks each stage
module of :mod:`metrobench.commands` to register its subcommands (options beside
their handlers there), and :func:`main` turns errors into that one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from metrobench.errors import MetrobenchError


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one ``metrobench: error:`` line (no usage block), status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        stage = self.prog.removeprefix("metrobench").strip()
        print(f"metrobench: error: {stage + ': ' if stage else ''}{_one_line(message)}", file=sys.stderr)
        sys.exit(2)


def _one_line(message: object) -> str:
    return "; ".join(line.strip() for line in str(message).splitlines() if line.strip())


def build_parser() -> argparse.ArgumentParser:
    """Every stage's subcommands, in the order ``metrobench --help`` lists them."""
    from metrobench.commands import (baseline, builds, calibration, data, doctor, evaluate, models, paper, plan,
                                     publish, runs, scoring, tools, training)

    parser = Parser(prog="metrobench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="STAGE")
    for stage in (doctor, builds, data, models, tools, baseline, scoring, runs, evaluate, training, paper, calibration,
                  plan, publish):
        stage.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error, already printed on one line (2)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.func(args)
    except MetrobenchError as exc:
        print(f"metrobench: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the system refuses: a directory, /proc, a missing binary
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"metrobench: error: {where}{_one_line(exc.strerror or exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
