"""A local JSON-over-HTTP server for the fake API peers: requests recorded, answers scripted.

Subclasses implement :meth:`FakeJSONServer.answer`, turning one recorded
request (``path``, ``query``, lower-cased ``headers``, parsed ``body``) into
``(status, payload, headers)``; a ``bytes`` payload is sent as it is (as
``text/html`` unless the headers say otherwise), for replies that are not
JSON; :data:`DROP` closes the connection without an answer (a server process that
died mid-request). Used as a context manager: started on 127.0.0.1 and ``port`` (0: a free
one) on entry, stopped on exit.

GET requests (a client asking a server's ``/props``) are recorded apart, in ``gets``, so
``requests`` stays the POSTs, and answered by :meth:`FakeJSONServer.answer_get`: HTTP 404
unless a subclass answers them.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


#: An answer that is no answer: the connection is closed before any byte is sent.
DROP = object()


class FakeJSONServer:
    def __init__(self, port: int = 0) -> None:
        self.requests: list[dict] = []
        self.gets: list[dict] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length", 0))
                parts = urlsplit(self.path)
                request = {"path": parts.path, "query": parse_qs(parts.query),
                           "headers": {k.lower(): v for k, v in self.headers.items()},
                           "body": json.loads(self.rfile.read(length) or b"{}")}
                with fake.lock:
                    fake.requests.append(request)
                self.reply(*fake.answer(request))

            def do_GET(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                request = {"path": parts.path, "query": parse_qs(parts.query),
                           "headers": {k.lower(): v for k, v in self.headers.items()}, "body": None}
                with fake.lock:
                    fake.gets.append(request)
                self.reply(*fake.answer_get(request))

            def reply(self, status: int, payload: Any, headers: dict[str, str]) -> None:
                if payload is DROP:
                    self.close_connection = True
                    return
                raw = isinstance(payload, bytes)
                data = payload if raw else json.dumps(payload).encode()
                self.send_response(status)
                if "content-type" not in {k.lower() for k in headers}:
                    self.send_header("content-type", "text/html" if raw else "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, request: dict) -> tuple[int, Any, dict[str, str]]:
        raise NotImplementedError

    def answer_get(self, request: dict) -> tuple[int, Any, dict[str, str]]:
        """A GET's answer: 404 here (a server with nothing to GET)."""
        return 404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, {}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
