"""A local HTTP server speaking the Anthropic Messages API's wire format (POST /v1/messages).

The real service cannot be reached from here, so the anthropic backend is
tested against this: real HTTP, the SDK's real request, replies and error
bodies shaped as the API documents them (``message`` objects; ``error``
objects with ``rate_limit_error`` / ``overloaded_error`` and a ``retry-after``
header). ``reply`` decides the judge's text from the prompt; ``failures`` is a
queue of statuses to answer before replying normally.
"""

from __future__ import annotations

from collections.abc import Callable

from metrobench.standins.json_server import FakeJSONServer

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
               500: "api_error", 529: "overloaded_error"}


class FakeMessagesAPI(FakeJSONServer):
    def __init__(self, reply: Callable[[str], str], port: int = 0) -> None:
        super().__init__(port)
        self.reply = reply
        self.failures: list[int] = []

    def answer(self, request: dict) -> tuple[int, dict, dict[str, str]]:
        with self.lock:
            status = self.failures.pop(0) if self.failures else 200
            count = len(self.requests)
        if request["path"] != "/v1/messages":
            status = 404
        if status != 200:
            payload = {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"),
                                                  "message": f"fake status {status}"}}
            return status, payload, {"retry-after": "0"} if status == 429 else {}
        body = request["body"]
        prompt = body["messages"][0]["content"]
        if isinstance(prompt, list):
            prompt = "".join(part.get("text", "") for part in prompt)
        text = self.reply(prompt)
        return 200, {
            "id": f"msg_fake{count:04d}", "type": "message", "role": "assistant",
            "model": body["model"], "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": len(prompt) // 4, "output_tokens": len(text) // 4},
        }, {"request-id": "req_fake"}
