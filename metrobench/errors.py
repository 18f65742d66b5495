"""Errors a user can cause and fix; the CLI prints them without a traceback."""

from __future__ import annotations


class MetrobenchError(Exception):
    """Base class for user-facing errors (bad input, missing files, bad config)."""


class DataError(MetrobenchError):
    """A benchmark data file is missing, malformed or inconsistent.

    The message always names the file and, where one applies, the case id and
    the field, so a user can find the problem without reading a traceback.
    """

    def __init__(self, file: str, message: str, *, case_id: str | None = None,
                 field: str | None = None) -> None:
        self.file = file
        self.case_id = case_id
        self.field = field
        where = [file]
        if case_id is not None:
            where.append(f"case {case_id}")
        if field is not None:
            where.append(f"field {field}")
        super().__init__(": ".join(where) + ": " + message)


def not_utf8(exc: UnicodeDecodeError) -> str:
    """What a decoding failure says to the user: the offending byte and its offset."""
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
