"""A local HTTP server speaking the OpenAI wire formats: chat completions and the Responses API.

It serves the paths the runner's dialects use — ``/v1/chat/completions``,
Azure's ``/openai/deployments/<name>/chat/completions?api-version=...`` and
``.../responses?api-version=...`` — and answers with objects shaped as the
APIs document them. ``script(request)`` returns ``(status, payload)`` or just a
payload; helpers build chat (:func:`chat_payload`, :func:`tool_call`) and Responses
(:func:`responses_payload`) payloads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from metrobench.standins.json_server import FakeJSONServer


def chat_payload(content: str | None = "", tool_calls: list[dict] | None = None, *,
                 finish_reason: str | None = None, reasoning: str | None = None,
                 prompt_tokens: int = 100, completion_tokens: int = 20, cached: int | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}],
            "usage": usage}


def responses_payload(text: str = "", *, reasoning: str | None = None, input_tokens: int = 100,
                      output_tokens: int = 20) -> dict:
    """A completed Responses API object whose output is one assistant message (and a reasoning summary)."""
    output: list[dict[str, Any]] = []
    if reasoning is not None:
        output.append({"type": "reasoning", "id": "rs_fake", "summary": [{"type": "summary_text", "text": reasoning}]})
    output.append({"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]})
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens,
             "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    return {"id": "resp_fake", "object": "response", "created_at": 0, "model": "fake", "status": "completed",
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "output": output, "usage": usage}


def tool_call(name: str, arguments: Any, call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments if isinstance(arguments, str)
                         else json.dumps(arguments)}}


class FakeOpenAI(FakeJSONServer):
    """``props``: what ``GET /props`` answers, as llama-server does (``{"total_slots": 4, ...}``); ``None``
    (the default): 404, a server without it."""

    def __init__(self, script: Callable[[dict], Any], port: int = 0, *, props: dict | None = None) -> None:
        super().__init__(port)
        self.script = script
        self.props = props

    def answer_get(self, request: dict) -> tuple[int, Any, dict[str, str]]:
        if request["path"] == "/props" and self.props is not None:
            return 200, self.props, {}
        return super().answer_get(request)

    def answer(self, request: dict) -> tuple[int, Any, dict[str, str]]:
        answer = self.script(request)
        if isinstance(answer, tuple):
            return answer[0], answer[1], (answer[2] if len(answer) > 2 else {})
        return 200, answer, {}
