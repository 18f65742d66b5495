"""``metrobench <stage>``: one command per pipeline stage, the same entry points the rules call.

User mistakes (a missing file, a malformed case, a bad argument) end with one
``metrobench: error: ...`` line and exit status 2, never a traceback: argparse's
own errors included, and any file the system refuses (a directory where a file
belongs, a read-only place such as /proc, a missing executable).

This module keeps only the entry point: :func:`build_parser` asks each stage
module of :mod:`metrobench.commands` to register its subcommands (options beside
their handlers there), and :func:`main` turns errors into that one line.

No key reaches the terminal from a command line (``eval --openai-api-key sk-...``,
``fetch-model --token hf_...``): an unrecognised argument is reported by its flag
name only (the part before ``=``; a stray value is counted, not shown), and every
error line has the command line's key-shaped words masked
(:func:`metrobench.credentials.scrub_argv`: an invalid choice, a refused value).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextvars import ContextVar

from metrobench.credentials import looks_like_secret, scrub_argv
from metrobench.errors import MetrobenchError

#: The command line being parsed, whose key-shaped words no error line may show.
_ARGV: ContextVar[tuple[str, ...]] = ContextVar("metrobench_argv", default=())


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one ``metrobench: error:`` line (no usage block), status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        stage = self.prog.removeprefix("metrobench").strip()
        _print_error(f"{stage + ': ' if stage else ''}{_one_line(message)}")
        sys.exit(2)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """argparse's, but an unrecognised argument is named by its flag only: argparse prints the words
        back whole, and the word after ``--openai-api-key`` is the key."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            stage = getattr(parsed, "command", None)
            self.error(f"{stage + ': ' if stage else ''}{unknown_arguments(extras)}"
                       f"; see metrobench {stage + ' ' if stage else ''}--help")
        return parsed


def unknown_arguments(extras: Sequence[str]) -> str:
    """What argparse could not place, as flag names only (before any ``=``); values are counted, never shown."""
    names: list[str] = []
    values = 0
    for word in extras:
        if word.startswith("-") and len(word) > 1 and not word[1:2].isdigit():
            name = word.partition("=")[0]
            names.append("(a flag that looks like a key)" if looks_like_secret(name) else name)
            values += "=" in word
        else:
            values += 1
    shown = ", ".join(dict.fromkeys(names)) or "none"
    plural = "s" if len(names) != 1 else ""
    tail = f" ({values} value{'s' if values != 1 else ''} not shown)" if values else ""
    return f"unrecognized argument{plural}: {shown}{tail}"


def _print_error(message: str) -> None:
    """The one ``metrobench: error:`` line, with the command line's key-shaped words masked."""
    print(f"metrobench: error: {scrub_argv(message, _ARGV.get())}", file=sys.stderr)


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
    words = tuple(sys.argv[1:] if argv is None else argv)
    token = _ARGV.set(words)
    try:
        return _main(build_parser(), list(words))
    finally:
        _ARGV.reset(token)


def _main(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error, already printed on one line (2)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.func(args)
    except MetrobenchError as exc:
        _print_error(_one_line(exc))
        return 2
    except OSError as exc:  # a path the system refuses: a directory, /proc, a missing binary
        where = f"{exc.filename}: " if exc.filename else ""
        _print_error(f"{where}{_one_line(exc.strerror or exc)}")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
