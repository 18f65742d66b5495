"""The reference's training text: tool calls as Hermes JSON text in the assistant's content.

The paper's ``prepare_data.py`` (reference spec §11.2, step 3) did not keep
structured tool calls. It rewrote each conversation before rendering it:

* system and user messages: ``{role, content}``;
* an assistant message with tool calls: one assistant message whose content
  is one block per call, ``<tool_call>\\n{"name": <name>, "arguments":
  <args>}\\n</tool_call>``, joined by ``\\n``, where ``<args>`` is the parsed
  arguments when the arguments string is JSON and the raw string otherwise,
  and the block is ``json.dumps`` with Python's defaults (``", "`` and
  ``": "`` separators, non-ASCII escaped as ``\\uXXXX``: the spec names no
  other option for the block; ``ensure_ascii=False`` applies only to the JSONL
  file the content is then stored in). The assistant's own text and its
  ``reasoning_content`` are dropped;
* an assistant message without tool calls: its content; an empty one discards
  the whole example;
* a tool message: ``{role: "tool", content}`` (no ``tool_call_id``, no name);
* any other role: skipped;

and kept an example only if the result has system, user and assistant roles.
The base's chat template then renders it without ``tools=`` (§11.3). A
recipe's ``tool_call_format: hermes-json`` trains on this text
(:func:`formatted`); ``native`` keeps the structured calls, which the chat
template renders in its own call syntax. Arguments that are already objects
(not JSON text) are embedded as they are.
"""

from __future__ import annotations

import json
from typing import Any

HERMES_JSON = "hermes-json"
NATIVE = "native"
#: The values of a recipe's ``tool_call_format``.
TOOL_CALL_FORMATS = (NATIVE, HERMES_JSON)


def _arguments(arguments: Any) -> Any:
    """Parsed JSON arguments, or the raw string where it is not JSON."""
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def tool_call_block(name: str, arguments: Any) -> str:
    """One call as the reference wrote it: ``<tool_call>``, the JSON line, ``</tool_call>``."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": _arguments(arguments)}) + "\n</tool_call>"


def hermes_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """``messages`` (OpenAI format) as the reference trained them; ``None`` where it discarded the example."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "user"):
            out.append({"role": role, "content": message.get("content")})
        elif role == "assistant":
            calls = message.get("tool_calls")
            if calls:
                content = "\n".join(tool_call_block(c["function"]["name"], c["function"].get("arguments"))
                                    for c in calls)
            else:
                content = message.get("content")
                if not content:
                    return None
            out.append({"role": "assistant", "content": content})
        elif role == "tool":
            out.append({"role": "tool", "content": message.get("content")})
    roles = {m["role"] for m in out}
    return out if {"system", "user", "assistant"} <= roles else None


def formatted(rows: list[dict[str, Any]], tool_call_format: str) -> tuple[list[dict[str, Any]], int]:
    """``{"messages", "tools"}`` rows in a recipe's call format, and how many the format discards.

    ``native`` returns the rows unchanged; ``hermes-json`` converts each row's
    messages (:func:`hermes_messages`) and leaves out the rows the reference
    discarded. The ``tools`` stay with the row: whether they are rendered is
    the recipe's ``tool_schemas``.
    """
    if tool_call_format == NATIVE:
        return rows, 0
    if tool_call_format != HERMES_JSON:
        raise ValueError(f"tool_call_format {tool_call_format!r}: expected one of {', '.join(TOOL_CALL_FORMATS)}")
    out = []
    for row in rows:
        messages = hermes_messages(row["messages"])
        if messages is not None:
            out.append({**row, "messages": messages})
    return out, len(rows) - len(out)
