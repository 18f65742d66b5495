"""A local HTTP server speaking the OpenAI wire formats: chat completions and the Responses API.

It serves the paths the runner's dialects use — ``/v1/chat/completions``,
Azure's ``/openai/deployments/<name>/chat/completions?api-version=...`` and
``.../responses?api-version=...`` — and answers with objects shaped as the
APIs document them. ``script(request)`` returns ``(status, payload)`` or just a
payload; helpers build chat and Responses payloads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


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


def tool_call(name: str, arguments: Any, call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments if isinstance(arguments, str)
                         else json.dumps(arguments)}}


class FakeOpenAI:
    def __init__(self, script: Callable[[dict], Any]) -> None:
        self.script = script
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                parts = urlsplit(self.path)
                request = {"path": parts.path, "query": parse_qs(parts.query),
                           "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                with api._lock:
                    api.requests.append(request)
                answer = api.script(request)
                status, payload, headers = 200, answer, {}
                if isinstance(answer, tuple):
                    status, payload = answer[0], answer[1]
                    headers = answer[2] if len(answer) > 2 else {}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeOpenAI":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
