"""Reading JSON Lines files, every failure naming the file and the line.

Transcripts, replayed tool calls, training sets and the judge's cache are all
one JSON value per line. They share one reader so that they share one set of
messages (``FILE: line N: ...``) and one rule for the last line: a line with
no newline after it that does not parse is what a killed writer leaves
behind. Readers that append (transcripts, the judge cache) pass
``unfinished="skip"`` and treat it as not written; the others call it an error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from metrobench.errors import MetrobenchError, not_utf8


def read_utf8(path: Path) -> str:
    """A file's text; a byte that is not UTF-8 is an error naming the file and its line."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise MetrobenchError(f"{path}: line {line}: {not_utf8(exc)}") from None


def iter_lines(text: str, source: str | Path, *,
               unfinished: Literal["error", "skip"] = "error") -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of ``text``.

    ``unfinished="skip"``: an unparsable last line without a newline is skipped
    with a warning instead of being an error (an interrupted append).
    """
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except RecursionError:
            raise MetrobenchError(f"{source}: line {number}: JSON nested too deeply") from None
        except json.JSONDecodeError as exc:
            if unfinished == "skip" and number == len(lines):
                print(f"metrobench: warning: {source}: line {number}: unfinished record skipped "
                      f"(an interrupted run?)", file=sys.stderr)
                return
            raise MetrobenchError(f"{source}: line {number}: not valid JSON ({exc.msg})") from None
        yield number, value


def iter_objects(path: Path, *, field: str | None = None,
                 unfinished: Literal["error", "skip"] = "error") -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` per line of a JSONL file of objects.

    ``field``: each object must carry it as a string (the error names it).
    """
    path = Path(path)
    for number, value in iter_lines(read_utf8(path), path, unfinished=unfinished):
        if not isinstance(value, dict) or (field is not None and not isinstance(value.get(field), str)):
            expected = f"a JSON object with a string {field}" if field else "a JSON object"
            where = f"field {field}: " if field else ""
            raise MetrobenchError(f"{path}: line {number}: {where}each line must be {expected}")
        yield number, value
