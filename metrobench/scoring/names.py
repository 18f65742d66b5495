"""Model and system names: they become folder names, so they are checked before use."""

from __future__ import annotations

import re

from metrobench.errors import MetrobenchError

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")   # fullmatch: "$" would let a final newline in


def check_name(kind: str, value: str) -> str:
    """``value`` if it can name a folder on every platform, else a clear error."""
    if not isinstance(value, str) or not _SAFE.fullmatch(value):
        raise MetrobenchError(f"{kind} name {value!r} cannot name a folder: use letters, digits, "
                              "'.', '_', '+' and '-'")
    return value
