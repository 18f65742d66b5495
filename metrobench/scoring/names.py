"""Model and system names: they become folder names, so they are checked before use."""

from __future__ import annotations

import re

from metrobench.errors import MetrobenchError

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def check_name(kind: str, value: str) -> str:
    """``value`` if it can name a folder on every platform, else a clear error."""
    if not _SAFE.match(value or ""):
        raise MetrobenchError(f"{kind} name {value!r} cannot name a folder: use letters, digits, "
                              "'.', '_', '+' and '-'")
    return value
