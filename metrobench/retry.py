"""How long to wait before another attempt at a remote call (the model endpoint, the judge).

Both remote clients retry transient failures (HTTP 429, 5xx, connection errors,
a malformed 200) the same way: the server's ``retry-after`` when it sends one,
else exponential backoff from a base delay with up to 25 % jitter, so that
parallel workers do not retry in step; never more than a minute at a time.
A ``retry-after`` that is not a finite, non-negative number of seconds (``-5``,
``nan``, an HTTP date) is ignored in favour of the backoff.
"""

from __future__ import annotations

import math
import random
from typing import Any

MAX_DELAY_S = 60.0


def retry_after(exc: Any) -> float | None:
    """The ``retry-after`` seconds of an SDK exception's HTTP response, if it has a usable one."""
    try:
        value = exc.response.headers.get("retry-after")
        seconds = float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


def backoff_delay(attempt: int, base_s: float, server_says: float | None = None) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based)."""
    delay = server_says if server_says is not None else base_s * 2 ** (attempt - 1) * (1 + random.random() / 4)
    return min(delay, MAX_DELAY_S)
