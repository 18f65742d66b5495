"""A local stand-in for the Hugging Face Hub's HTTP API, for download tests without a network.

It answers what ``huggingface_hub`` asks of the real hub when ``HF_ENDPOINT``
points at it: ``GET /api/models/<repo>/revision/<rev>`` (the commit and its
files), ``GET /api/models/<repo>/tree/<rev>/...`` (the file listing), and
``HEAD``/``GET /<repo>/resolve/<rev>/<file>`` with the headers the client
reads (``X-Repo-Commit``, ``ETag``, ``Content-Length``). Only the pinned
commit resolves; any other revision or file is a 404 with the hub's
``X-Error-Code`` header. Every request path is recorded in ``requests``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, bytes]], commit: str) -> None:
        self.repos, self.commit, self.requests = repos, commit, []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                hub._answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub._answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def _send(self, handler, status: int, payload: bytes, headers: dict[str, str], body: bool) -> None:
        handler.send_response(status)
        for key, value in {"Content-Length": str(len(payload)), **headers}.items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            handler.wfile.write(payload)

    def _not_found(self, handler, body: bool, code: str) -> None:
        payload = json.dumps({"error": code}).encode()
        self._send(handler, 404, payload, {"Content-Type": "application/json", "X-Error-Code": code}, body)

    def _answer(self, handler, *, body: bool) -> None:
        path = unquote(urlparse(handler.path).path)
        self.requests.append(f"{handler.command} {path}")
        if path.startswith("/api/models/"):
            return self._api(handler, path[len("/api/models/"):], body)
        repo, sep, rest = path.lstrip("/").partition("/resolve/")
        revision, _, name = rest.partition("/")
        if not sep or repo not in self.repos:
            return self._not_found(handler, body, "RepoNotFound")
        if revision != self.commit:
            return self._not_found(handler, body, "RevisionNotFound")
        if name not in self.repos[repo]:
            return self._not_found(handler, body, "EntryNotFound")
        data = self.repos[repo][name]
        headers = {"X-Repo-Commit": self.commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                   "Content-Type": "application/octet-stream"}
        self._send(handler, 200, data, headers, body)

    def _api(self, handler, rest: str, body: bool) -> None:
        for kind in ("/revision/", "/tree/"):
            repo, sep, tail = rest.partition(kind)
            if sep:
                break
        else:
            return self._not_found(handler, body, "RepoNotFound")
        revision = tail.split("/", 1)[0]
        if repo not in self.repos:
            return self._not_found(handler, body, "RepoNotFound")
        if revision != self.commit:
            return self._not_found(handler, body, "RevisionNotFound")
        files = self.repos[repo]
        if kind == "/tree/":
            answer = [{"type": "file", "path": n, "size": len(d), "oid": hashlib.sha1(d).hexdigest()}
                      for n, d in sorted(files.items())]
        else:
            answer = {"id": repo, "modelId": repo, "sha": self.commit, "private": False,
                      "siblings": [{"rfilename": n, "size": len(d)} for n, d in sorted(files.items())]}
        self._send(handler, 200, json.dumps(answer).encode(), {"Content-Type": "application/json"}, body)

    def __enter__(self) -> "FakeHub":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
