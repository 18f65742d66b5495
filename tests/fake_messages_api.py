"""A local HTTP server speaking the Anthropic Messages API's wire format (POST /v1/messages).

The real service cannot be reached from here, so the anthropic backend is
tested against this: real HTTP, the SDK's real request, replies and error
bodies shaped as the API documents them (``message`` objects; ``error``
objects with ``rate_limit_error`` / ``overloaded_error`` and a ``retry-after``
header). ``reply`` decides the judge's text from the prompt; ``failures`` is a
queue of statuses to answer before replying normally.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
               500: "api_error", 529: "overloaded_error"}


class FakeMessagesAPI:
    def __init__(self, reply: Callable[[str], str]) -> None:
        self.reply = reply
        self.failures: list[int] = []
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                with api._lock:
                    api.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                    status = api.failures.pop(0) if api.failures else 200
                if self.path != "/v1/messages":
                    status = 404
                if status != 200:
                    payload = {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"),
                                                          "message": f"fake status {status}"}}
                    self._send(status, payload, {"retry-after": "0"} if status == 429 else {})
                    return
                prompt = body["messages"][0]["content"]
                if isinstance(prompt, list):
                    prompt = "".join(part.get("text", "") for part in prompt)
                text = api.reply(prompt)
                self._send(200, {
                    "id": f"msg_fake{len(api.requests):04d}", "type": "message", "role": "assistant",
                    "model": body["model"], "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn", "stop_sequence": None,
                    "usage": {"input_tokens": len(prompt) // 4, "output_tokens": len(text) // 4},
                }, {"request-id": "req_fake"})

            def _send(self, status: int, payload: dict, headers: dict) -> None:
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

    def __enter__(self) -> "FakeMessagesAPI":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
