"""A model endpoint's HTTP 200 body, read into the one chat shape the loop uses — or refused.

The runner reads the body's JSON itself (never the SDK's unvalidated models)
and checks every field it uses, so that no reply, however shaped, can crash a
run: a body that is not the shape the dialect promises raises
:class:`MalformedReply`, which ends the case as the reference's exception did
(``malformed``, scored; retried first with the protocol's ``retry`` option). What is accepted:

* ``content``: a string or null; or a list of parts (Mistral's reasoning
  models): string parts and parts with a string ``text`` are the content,
  joined without a separator; ``{"type": "thinking", "thinking": ...}`` parts
  are the reasoning (``reasoning_content``, unless the message has one); other
  object parts (references, images) are skipped. A number, an object or a part
  that is neither a string nor an object is malformed.
* ``tool_calls``: null or a list of objects, each with a ``function`` object
  whose ``name`` is a string and whose ``arguments`` are a string, an object or
  null (the loop reads them as the protocol says: :mod:`metrobench.agents.runner.protocol`).
* token counts: integers (or null/absent, read as 0); a string, a boolean or a
  fraction is malformed. Reasoning tokens (``usage.completion_tokens_details.reasoning_tokens``;
  the Responses API's ``usage.output_tokens_details.reasoning_tokens``) are a part of the
  completion tokens, kept apart where the endpoint reports them (None where it does not).

Lone surrogates (``"\\ud800"``, which JSON may carry but UTF-8 cannot) become
U+FFFD REPLACEMENT CHARACTER everywhere in the body before anything reads it,
so the conversation sent back, the parsed tool arguments and the transcript all
hold the same text, and every writer can encode it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

#: A surrogate code point on its own (Python joins a valid JSON pair into one character).
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class MalformedReply(Exception):
    """An HTTP 200 whose body is not the shape the dialect promises (the case's ending unless retried)."""


@dataclass
class ChatReply:
    message: dict[str, Any]
    finish_reason: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    elapsed_ms: float = 0.0
    reasoning_tokens: int | None = None  # of completion_tokens; None: the endpoint does not say
    #: Failures retried before this reply came (``"429"``, ``"500"``, ``"timeout"``, ``"malformed"``,
    #: ``"connection"``), in order: what the loop records of the protocol's retries.
    retried: list[str] = field(default_factory=list)


def snippet(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return " ".join(text.split())[:200]


def clean(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys included) replaced by U+FFFD."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def parse_body(text: str) -> Any:
    """The 200's body as JSON, lone surrogates replaced; a body that is not JSON is malformed."""
    try:
        return clean(json.loads(text))
    except (json.JSONDecodeError, RecursionError):
        raise MalformedReply(f"HTTP 200 body is not JSON: {snippet(text)}") from None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _text_of(value: Any, where: str) -> str:
    """A thinking part's text: a string or a list of text parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_text_of(p.get("text", "") if isinstance(p, dict) else p, where) for p in value)
    raise MalformedReply(f"{where} is {_kind(value)}, not text")


def content_text(value: Any) -> tuple[str, str]:
    """``(content, thinking)`` of a message's ``content`` field (see the module docstring)."""
    if value is None or isinstance(value, str):
        return value or "", ""
    if not isinstance(value, list):
        raise MalformedReply(f"message.content is {_kind(value)} ({snippet(value)}), not text or a list of parts")
    text, thinking = [], []
    for index, part in enumerate(value):
        where = f"message.content[{index}]"
        if isinstance(part, str):
            text.append(part)
        elif not isinstance(part, dict):
            raise MalformedReply(f"{where} is {_kind(part)}, not a part object")
        elif part.get("type") == "thinking":
            thinking.append(_text_of(part.get("thinking", ""), f"{where}.thinking"))
        elif "text" in part:
            text.append(_text_of(part["text"], f"{where}.text"))
    return "".join(text), "".join(thinking)


def tool_calls(value: Any) -> list[dict[str, Any]]:
    """A message's ``tool_calls``, checked: a list of ``{id, type, function: {name, arguments}}``."""
    if not isinstance(value, list):
        raise MalformedReply(f"message.tool_calls is {_kind(value)}, not a list")
    calls = []
    for index, call in enumerate(value):
        where = f"message.tool_calls[{index}]"
        if not isinstance(call, dict):
            raise MalformedReply(f"{where} is {_kind(call)} ({snippet(call)}), not a call object")
        function = call.get("function")
        if not isinstance(function, dict):
            raise MalformedReply(f"{where}.function is {_kind(function)}, not an object")
        if not isinstance(function.get("name"), str):
            raise MalformedReply(f"{where}.function.name is {_kind(function.get('name'))}, not a string")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, (str, dict)):
            raise MalformedReply(f"{where}.function.arguments is {_kind(arguments)}, not a JSON string")
        if call.get("id") is not None and not isinstance(call["id"], str):
            raise MalformedReply(f"{where}.id is {_kind(call['id'])}, not a string")
        calls.append(call)
    return calls


def token_count(usage: dict[str, Any], key: str, where: str = "usage") -> int:
    """A token count: an integer (a whole float too); null or absent is 0."""
    value = usage.get(key)
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedReply(f"{where}.{key} is {snippet(value)}, not a token count")
    return value


def _detail(usage: dict[str, Any], details: str, key: str) -> int | None:
    """``usage.<details>.<key>`` as a token count; None when the endpoint does not report it."""
    extra = usage.get(details)
    if extra is None:
        return None
    if not isinstance(extra, dict):
        raise MalformedReply(f"usage.{details} is {_kind(extra)}, not an object")
    return token_count(extra, key, f"usage.{details}") if extra.get(key) is not None else None


def _usage(body: dict[str, Any], details: str, cached_key: str = "cached_tokens") -> tuple[dict, int | None]:
    usage = body.get("usage")
    if usage is None:
        return {}, None
    if not isinstance(usage, dict):
        raise MalformedReply(f"usage is {_kind(usage)}, not an object")
    return usage, _detail(usage, details, cached_key)


def checked_message(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message with text content, checked tool calls and text reasoning.

    A ``content`` of null stays null (a reply of tool calls only): the conversation sends the
    message back as the endpoint gave it, as the reference does, and a template renders null and
    ``""`` differently."""
    null_content = message.get("content") is None
    message = _drop_none(message)
    message["content"], thinking = content_text(message.get("content"))
    if null_content:
        message["content"] = None
    if thinking and not message.get("reasoning_content"):
        message["reasoning_content"] = thinking
    if "reasoning_content" in message and not isinstance(message["reasoning_content"], str):
        raise MalformedReply(f"message.reasoning_content is {_kind(message['reasoning_content'])}, not text")
    if "tool_calls" in message:
        message["tool_calls"] = tool_calls(message["tool_calls"])
    return message


def chat_reply(body: Any) -> ChatReply:
    """A chat-completions body as a :class:`ChatReply`."""
    if not isinstance(body, dict):
        raise MalformedReply(f"HTTP 200 body is not a JSON object: {snippet(body)}")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("message"), dict):
        raise MalformedReply(f"HTTP 200 body has no choices[0].message: {snippet(json.dumps(body))}")
    choice = choices[0]
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise MalformedReply(f"choices[0].finish_reason is {_kind(finish)}, not a string")
    usage, cached = _usage(body, "prompt_tokens_details")
    return ChatReply(checked_message(choice["message"]), finish, token_count(usage, "prompt_tokens"),
                     token_count(usage, "completion_tokens"), cached,
                     reasoning_tokens=_detail(usage, "completion_tokens_details", "reasoning_tokens"))


def chat_from_responses(response: dict[str, Any]) -> ChatReply:
    """A Responses API result as a chat-completions assistant message (fields checked)."""
    text, reasoning, calls = [], [], []
    output = response.get("output") or []
    for item in output:
        kind = item.get("type")
        if kind == "message":
            text.append(content_text([p for p in item.get("content") or []
                                      if not isinstance(p, dict) or p.get("type") == "output_text"])[0])
        elif kind == "function_call":
            calls.append({"id": item.get("call_id"), "type": "function",
                          "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}})
        elif kind == "reasoning":
            reasoning.append(_text_of(item.get("summary") or [], "reasoning.summary"))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = tool_calls(calls)
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    message["responses_output"] = output
    incomplete = (response.get("incomplete_details") or {}).get("reason")
    if response.get("status") == "incomplete" and incomplete == "max_output_tokens":
        finish = "length"
    else:
        finish = "tool_calls" if calls else "stop"
    usage, cached = _usage(response, "input_tokens_details")
    return ChatReply(message, finish, token_count(usage, "input_tokens"), token_count(usage, "output_tokens"),
                     cached, reasoning_tokens=_detail(usage, "output_tokens_details", "reasoning_tokens"))


def responses_reply(body: Any) -> ChatReply:
    """A Responses API body as a :class:`ChatReply`."""
    if not isinstance(body, dict) or not isinstance(body.get("output"), list):
        raise MalformedReply(f"HTTP 200 body has no output list: {snippet(json.dumps(body))}")
    try:
        return chat_from_responses(body)
    except (AttributeError, TypeError) as exc:  # an item or part that is not an object
        raise MalformedReply(f"HTTP 200 body's output is not Responses items: {exc}") from None
