"""Tool calls written as text: Hermes/Qwen ``<tool_call>`` blocks in a reply's content.

A server that does not parse tool calls itself (llama-cpp-python with the GGUF's
own template, a llama-server without ``--jinja``) hands back what the model
wrote: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks in the
``content``. Without this module the loop would end such a case as a plain-text
answer after one round. The contract:

* A block starts at ``<tool_call>``. If a JSON object follows (whitespace
  allowed), it is decoded with :meth:`json.JSONDecoder.raw_decode`, so nested
  braces and ``}``, ``"`` or ``</tool_call>`` inside string values are read as
  JSON, not cut by a pattern. The object must carry a non-empty string
  ``name``; ``arguments`` may be an object or a JSON string (missing: ``{}``).
* ``</tool_call>`` closes the block; the last block of a reply may lack it
  (small models stop early). A closed block holds exactly one JSON object.
* Every block becomes an OpenAI-shaped call, ``{"id": "call_text_<n>", "type":
  "function", "function": {"name": ..., "arguments": "<JSON string>"}}``, in
  the order written. A block that cannot be used (broken JSON, no name, text
  after its object) is still a call — with the name if one can be read — and
  carries the reason; the loop feeds it back to the model as a tool error, as
  it does for malformed JSON arguments, instead of ending the case.
* ``<tool_call>`` followed by neither a JSON object nor a closing tag is a
  mention in prose, not a call, and stays in the content.
* The text outside the blocks (before, between, after) is the message's
  content, stripped — what llama-server's ``--jinja`` parsing and vLLM's
  ``hermes`` parser return — so a conversation sent back to the model, or
  turned into training data, shows each call once, as a call.

:func:`apply_tool_parser` applies a model config's ``tool_parser`` setting:
``auto`` parses the text only when the reply has no structured ``tool_calls``;
``hermes`` also parses blocks left in the content next to structured calls
(a server that parsed some of the model's blocks but not all), appending them;
``none`` never parses text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

ToolParser = Literal["auto", "hermes", "none"]

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
ID_PREFIX = "call_text_"

_DECODER = json.JSONDecoder()
#: The ``"name"`` of a block whose JSON is broken, read only to record which tool it meant.
_NAME = re.compile(r'\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")')


@dataclass
class TextCall:
    """One ``<tool_call>`` block as a call; ``error`` says why it cannot be run (None: it can)."""

    call: dict[str, Any]
    error: str | None = None

    @property
    def id(self) -> str:
        return self.call["id"]


@dataclass
class TextParse:
    """A reply's content split into prose and the calls its blocks hold."""

    content: str
    calls: list[TextCall] = field(default_factory=list)


def _call(index: int, name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"{ID_PREFIX}{index}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def _arguments_text(value: Any) -> str:
    """Arguments as the JSON string OpenAI's shape carries; a string is passed on as written.

    A string that is not JSON, or JSON that is not an object, is left for the
    loop's argument check to report to the model, like a structured call's.
    """
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _salvage_name(body: str) -> str:
    """The tool a broken block names, if its JSON begins readably; "" otherwise."""
    match = _NAME.match(body.lstrip())
    if not match:
        return ""
    try:
        name = json.loads(match.group(1))
    except json.JSONDecodeError:
        return ""
    return name if isinstance(name, str) else ""


def _next(text: str, marker: str, start: int) -> int:
    """Index of ``marker`` at or after ``start``; ``len(text)`` when absent."""
    found = text.find(marker, start)
    return len(text) if found < 0 else found


def _block_call(value: dict[str, Any], index: int) -> TextCall:
    """A decoded block's object as a call, or an error call when it names no tool."""
    name = value.get("name")
    arguments = _arguments_text(value.get("arguments"))
    if not isinstance(name, str) or not name:
        return TextCall(_call(index, "", json.dumps(value, ensure_ascii=False)),
                        'tool call block has no tool name; write {"name": "<tool>", "arguments": {...}}')
    return TextCall(_call(index, name, arguments))


def _broken_block(text: str, body_start: int, index: int, reason: str) -> tuple[TextCall, int]:
    """A block whose JSON cannot be decoded: it runs to its close, the next block or the end."""
    end = min(_next(text, CLOSE, body_start), _next(text, OPEN, body_start))
    body = text[body_start:end]
    closed = text.startswith(CLOSE, end)
    error = f"tool call block is not valid JSON ({reason})"
    if not closed:
        error += "; the block was not closed with </tool_call> (cut short?)"
    error += '; send one block per call: <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>'
    call = TextCall(_call(index, _salvage_name(body), body.strip()), error)
    return call, end + len(CLOSE) if closed else end


def _read_block(text: str, body_start: int, index: int) -> tuple[TextCall | None, int, str]:
    """The block whose body starts at ``body_start``: its call (None: a mention in prose),
    where the text after it resumes, and any prose that trails an unclosed block."""
    start = body_start
    while start < len(text) and text[start].isspace():
        start += 1
    if not text.startswith("{", start):
        close = text.find(CLOSE, body_start)
        if close < 0 or close > _next(text, OPEN, body_start):
            return None, body_start, ""
        # closed, but not JSON: an attempt at a call all the same
        return (*_broken_block(text, body_start, index, "it does not start with '{'"), "")
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        return (*_broken_block(text, body_start, index, f"{exc.msg}, character {exc.pos - start}"), "")
    call = _block_call(value, index)
    close = text.find(CLOSE, end)
    if 0 <= close < _next(text, OPEN, end):
        extra = text[end:close].strip()
        if extra:
            call = TextCall(call.call, f"tool call block has text after its JSON object ({extra[:40]!r}); "
                                       "send exactly one JSON object per block")
        return call, close + len(CLOSE), ""
    # unclosed (the last block, or one cut short before the next): what follows is prose
    stop = _next(text, OPEN, end)
    return call, stop, text[end:stop]


def parse_text_tool_calls(text: str, *, first_index: int = 1) -> TextParse:
    """Split ``text`` into prose and the calls of its ``<tool_call>`` blocks (ids from ``first_index``)."""
    prose: list[str] = []
    calls: list[TextCall] = []
    position = 0
    while True:
        opening = text.find(OPEN, position)
        if opening < 0:
            prose.append(text[position:])
            break
        prose.append(text[position:opening])
        body_start = opening + len(OPEN)
        call, resume, trailing = _read_block(text, body_start, first_index + len(calls))
        if call is None:
            prose.append(OPEN)
            position = body_start
            continue
        calls.append(call)
        prose.append(trailing)
        position = resume
    return TextParse("".join(prose).strip(), calls)


def apply_tool_parser(message: dict[str, Any], mode: ToolParser, *,
                      first_index: int = 1) -> tuple[dict[str, Any], list[TextCall]]:
    """The reply as the loop should take it, and the calls that came from its text.

    The returned message is a copy with the prose as ``content`` and the text
    calls appended to ``tool_calls``; with nothing to parse (or ``none``) it is
    the message itself and the list is empty.
    """
    structured = message.get("tool_calls") or []
    content = message.get("content") or ""
    if mode == "none" or OPEN not in content or (structured and mode == "auto"):
        return message, []
    parsed = parse_text_tool_calls(content, first_index=first_index)
    if not parsed.calls:
        return message, []
    new = dict(message)
    new["content"] = parsed.content
    new["tool_calls"] = [*structured, *(c.call for c in parsed.calls)]
    return new, parsed.calls
