"""Reading a model's raw submission the way the reference scorer reads it, minus its crashes.

The scorer sees the arguments exactly as the model wrote them, not as the tool
server coerced them (spec §13 #10). Where the reference scorer's arithmetic or
``.get`` calls work, these helpers return the very same values, so every score
it could compute comes out identical. Where it would raise (a number written as
a string, ``null`` where an object belongs, a list where a dict belongs) they
return what pydantic's lax mode would have made of the value, or an empty
container, so one odd answer scores as a wrong answer instead of aborting the
whole run. A value the reference compares without crashing is compared as
written (a passenger count ``"2"`` is not equal to ``2`` there, so not here).
"""

from __future__ import annotations

import math
from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a dict, else ``{}`` (where the reference would call ``.get`` on it)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a list, else ``[]`` (where the reference would iterate it)."""
    return value if isinstance(value, list) else []


def as_number(value: Any) -> float | int | None:
    """A number for arithmetic: numbers as they are, numeric strings parsed, else ``None``.

    Booleans stay booleans (Python treats them as 0/1 and so did the reference).
    A string parses as ``float()`` parses it, as an int when it has no fraction
    part so that ``"1" == 1`` holds after coercion.
    """
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        if math.isfinite(number) and number == int(number) and "." not in value and "e" not in value.lower():
            return int(number)
        return number
    return None


def as_text(value: Any) -> str:
    """A string for ``.lower()``: strings as they are, ``None`` as ``""``, others via ``str``."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def response_of(record_response: Any) -> dict[str, Any] | None:
    """The response as a terminal-state dict, or ``None`` when there is none to score.

    A plain-text ending that parsed as JSON but not as an object (a list, a
    number) has no outcome, action or message; the reference crashed on it, we
    score it as a response that could not be parsed.
    """
    if isinstance(record_response, dict):
        return record_response
    return None


def tool_calls_of(calls: Any) -> list[dict[str, Any]]:
    """The recorded tool calls, each a dict with a string ``name``.

    A malformed entry (not an object, or without a name) is kept as a call
    with an empty name: it was a call, and a call that names no tool counts as
    a hallucinated one.
    """
    out = []
    for call in as_list(calls):
        if not isinstance(call, dict):
            out.append({"name": "", "arguments": {}, "result": None, "error": None})
        elif not isinstance(call.get("name"), str):
            out.append({**call, "name": as_text(call.get("name"))})
        else:
            out.append(call)
    return out
