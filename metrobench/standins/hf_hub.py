"""A local stand-in for the Hugging Face Hub's HTTP API, for lock and download tests without a network.

It answers what ``huggingface_hub`` asks of the real hub when ``HF_ENDPOINT``
points at it:

* ``GET /api/models/<repo>/revision/<rev>[?blobs=true]``: the commit a branch,
  tag or commit resolves to, and its files (with ``blobs``: size, Git blob id
  and, for LFS files, ``lfs: {sha256, size}``), as ``HfApi.model_info`` reads;
* ``GET /api/models/<repo>/tree/<rev>/...``: the file listing;
* ``HEAD``/``GET /<repo>/resolve/<rev>/<file>``: a branch or tag name first
  redirects (307, relative) to the same file at its commit, as the hub does;
  then a small file answers 200 with its Git blob id as ``ETag``, and an LFS
  file (``.gguf``, ``.safetensors``) answers 302 to a second server standing
  for the CDN, with ``X-Linked-Etag`` (its SHA-256), ``X-Linked-Size`` and
  ``X-Repo-Commit``, which is what the client reads its metadata from.

The CDN honours ``Range: bytes=N-`` as a CDN does (206 with ``Content-Range``,
416 past the end), so a client can resume a partial download.

Faults for the tests: ``corrupt`` (file names whose bytes the CDN serves with
one byte flipped), ``cut`` (file names whose body the CDN cuts off halfway, the
``Content-Length`` promising all of it: a short body), ``stall`` (file names
whose body stops halfway: :attr:`stalled` is set, and the rest waits until
:attr:`release` is set; a test kills the client meanwhile, or starts a second
one), ``refuse`` (file name -> HTTP status its resolve answers, or repo ->
the status its metadata API answers: 401 a refused token, 403 no access, 500 a
server error), ``gated`` (repos that answer
401 GatedRepo), ``cut_after`` (file name -> a list of byte counts: each GET of
the file takes the first and cuts its body after that many bytes, the
``Content-Length`` promising all of it; an empty list answers whole: a link
reset N times), ``from_zero`` (file name -> how many ranged GETs the CDN answers
``206`` from byte 0, ``Content-Range: bytes 0-...``, whatever the range asked: a
proxy that ignores the range's start). Every request path is recorded in ``requests``; the CDN's GETs
with the ``Range`` they carried (None: none) in ``ranges``; the requests that
carried an ``Authorization`` header in ``authorized``. ``port`` and
``cdn_port`` are the ports bound on 127.0.0.1 (0: free ones).

Uploads, for publish tests (``HfApi.create_repo`` and ``upload_folder``/``create_commit``):
``POST /api/repos/create`` adds an empty repo (409 if it exists); ``POST
/api/models/<repo>/preupload/<rev>`` answers every file ``regular`` (its bytes travel inside
the commit, so neither LFS nor Xet is stood in for); ``POST /api/models/<repo>/commit/<rev>``
applies the NDJSON commit's ``file`` and ``deletedFile`` lines to the repo, records
``(repo, commit id, message)`` in ``commits`` and answers the commit id; ``POST
/api/validate-yaml`` (a README's front matter) finds nothing wrong.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

LFS_SUFFIXES = (".gguf", ".safetensors")
_RANGE = re.compile(r"^bytes=(\d+)-$")
#: How long a stalled body waits for :attr:`FakeHub.release` at most (a test that forgot it still ends).
STALL_LIMIT_S = 60.0


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _handler(answer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802
            answer(self, body=False)

        def do_GET(self) -> None:  # noqa: N802
            answer(self, body=True)

        def do_POST(self) -> None:  # noqa: N802
            answer(self, body=True)

    return Handler


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, bytes]], commit: str, *, branches: dict[str, str] | None = None,
                 corrupt: set[str] = frozenset(), cut: set[str] = frozenset(), stall: set[str] = frozenset(),
                 refuse: dict[str, int] | None = None, gated: set[str] = frozenset(), port: int = 0,
                 cdn_port: int = 0, cut_after: dict[str, list[int]] | None = None,
                 from_zero: dict[str, int] | None = None) -> None:
        self.repos, self.commit, self.requests = repos, commit, []
        self.ranges: list[tuple[str, str | None]] = []
        self.authorized: list[str] = []
        self.commits: list[tuple[str, str, str]] = []
        self.branches = {"main": commit, **(branches or {})}
        self.corrupt, self.cut, self.stall, self.gated = set(corrupt), set(cut), set(stall), set(gated)
        self.refuse: dict[str, int] = dict(refuse or {})
        self.cut_after: dict[str, list[int]] = {k: list(v) for k, v in (cut_after or {}).items()}
        self.from_zero: dict[str, int] = dict(from_zero or {})
        self.stalled, self.release = threading.Event(), threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self._answer))
        self.cdn = ThreadingHTTPServer(("127.0.0.1", cdn_port), _handler(self._cdn))
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_port}"

    def _send(self, handler, status: int, payload: bytes, headers: dict[str, str], body: bool,
              length: int | None = None) -> None:
        handler.send_response(status)
        for key, value in {"Content-Length": str(len(payload) if length is None else length), **headers}.items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            handler.wfile.write(payload)

    def _error(self, handler, body: bool, status: int, code: str | None, message: str | None = None) -> None:
        payload = json.dumps({"error": message or code}).encode()
        headers = {"Content-Type": "application/json"}
        if code:
            headers["X-Error-Code"] = code
        if message:
            headers["X-Error-Message"] = message
        self._send(handler, status, payload, headers, body)

    def _record(self, handler, line: str) -> None:
        self.requests.append(line)
        if handler.headers.get("Authorization"):
            self.authorized.append(line)

    def _commit_or_refuse(self, handler, body: bool, repo: str | None, revision: str) -> str | None:
        """The commit ``revision`` of ``repo`` resolves to; else the hub's error is sent and None returned."""
        if repo is None or repo not in self.repos:
            self._error(handler, body, 404, "RepoNotFound")
        elif repo in self.gated:
            self._error(handler, body, 401, "GatedRepo")
        elif self._commit_of(revision) is None:
            self._error(handler, body, 404, "RevisionNotFound")
        else:
            return self._commit_of(revision)
        return None

    def _commit_of(self, revision: str) -> str | None:
        if revision in self.branches:
            return self.branches[revision]
        return revision if revision in set(self.branches.values()) else None

    def _answer(self, handler, *, body: bool) -> None:
        url = urlparse(handler.path)
        path = unquote(url.path)
        self._record(handler, f"{handler.command} {path}")
        if handler.command == "POST":
            return self._post(handler, path)
        if path.startswith("/api/models/"):
            return self._api(handler, path[len("/api/models/"):], parse_qs(url.query), body)
        repo, sep, rest = path.lstrip("/").partition("/resolve/")
        revision, _, name = rest.partition("/")
        commit = self._commit_or_refuse(handler, body, repo if sep else None, revision)
        if commit is None:
            return None
        if name not in self.repos[repo]:
            return self._error(handler, body, 404, "EntryNotFound")
        if name in self.refuse:
            status = self.refuse[name]
            message = {401: "Invalid credentials in Authorization header",
                       403: "Access to this file is restricted"}.get(status, "Internal Error")
            return self._error(handler, body, status, None, message)
        if commit != revision:  # a branch: to the same file at its commit, as the hub redirects
            return self._send(handler, 307, b"", {"Location": f"/{repo}/resolve/{commit}/{name}"}, body)
        data = self.repos[repo][name]
        if name.endswith(LFS_SUFFIXES):
            sha = hashlib.sha256(data).hexdigest()
            headers = {"Location": f"{self.cdn_url}/{repo}/{name}", "X-Repo-Commit": commit,
                       "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data)), "ETag": f'"{git_sha1(data)}"'}
            return self._send(handler, 302, b"", headers, body)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_sha1(data)}"', "Content-Type": "application/octet-stream"}
        self._send(handler, 200, data, headers, body)

    def _cdn(self, handler, *, body: bool) -> None:
        path = unquote(urlparse(handler.path).path).lstrip("/")
        self._record(handler, f"CDN {handler.command} /{path}")
        asked = handler.headers.get("Range")
        if handler.command == "GET":
            self.ranges.append((f"/{path}", asked))
        repo, _, name = path.rpartition("/")
        data = self.repos.get(repo, {}).get(name)
        if data is None:
            return self._error(handler, body, 404, "NoSuchKey")
        if name in self.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        status, headers, start = 200, {"Content-Type": "application/octet-stream"}, 0
        if asked and (match := _RANGE.match(asked)):
            start = int(match[1])
            if start >= len(data):
                return self._send(handler, 416, b"", {"Content-Range": f"bytes */{len(data)}"}, body)
            if self.from_zero.get(name, 0) > 0 and handler.command == "GET":   # a proxy: the range's start ignored
                self.from_zero[name] -= 1
                start = 0
            status, headers["Content-Range"] = 206, f"bytes {start}-{len(data) - 1}/{len(data)}"
        part = data[start:]
        cuts = self.cut_after.get(name)
        if body and cuts:
            self._send(handler, status, part[:cuts.pop(0)], headers, body, length=len(part))
            handler.wfile.flush()
            handler.close_connection = True
            return
        if body and (name in self.cut or name in self.stall):
            half = len(part) // 2
            self._send(handler, status, part[:half], headers, body, length=len(part))
            handler.wfile.flush()
            if name in self.stall:
                self.stalled.set()
                self.release.wait(STALL_LIMIT_S)
                try:
                    handler.wfile.write(part[half:])
                except OSError:
                    pass           # the client was killed meanwhile
            handler.close_connection = True
            return
        self._send(handler, status, part, headers, body)

    def _api(self, handler, rest: str, query: dict[str, list[str]], body: bool) -> None:
        for kind in ("/revision/", "/tree/"):
            repo, sep, tail = rest.partition(kind)
            if sep:
                break
        else:
            return self._error(handler, body, 404, "RepoNotFound")
        revision = tail.split("/", 1)[0]
        if repo in self.refuse:
            return self._error(handler, body, self.refuse[repo], None, "Internal Error")
        commit = self._commit_or_refuse(handler, body, repo, revision)
        if commit is None:
            return None
        files = self.repos[repo]
        if kind == "/tree/":
            answer = [{"type": "file", "path": n, "size": len(d), "oid": git_sha1(d)} for n, d in sorted(files.items())]
        else:
            blobs = query.get("blobs") == ["True"] or query.get("blobs") == ["true"]
            answer = {"id": repo, "modelId": repo, "sha": commit, "private": False,
                      "siblings": [self._sibling(n, d, blobs) for n, d in sorted(files.items())]}
        self._send(handler, 200, json.dumps(answer).encode(), {"Content-Type": "application/json"}, body)

    def _post(self, handler, path: str) -> None:
        """The upload endpoints: create a repo, preupload (all regular), commit."""
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        reply = lambda value, status=200: self._send(  # noqa: E731
            handler, status, json.dumps(value).encode(), {"Content-Type": "application/json"}, True)
        if path == "/api/repos/create":
            asked = json.loads(raw)
            repo = f"{asked['organization']}/{asked['name']}" if asked.get("organization") else asked["name"]
            if repo in self.repos:
                return self._error(handler, True, 409, None, "You already created this model repo")
            self.repos[repo] = {}
            return reply({"url": f"{self.url}/{repo}", "name": repo})
        if path == "/api/validate-yaml":   # a README's front matter, checked before the commit
            return reply({"errors": [], "warnings": []})
        rest = path[len("/api/models/"):] if path.startswith("/api/models/") else ""
        for kind in ("/preupload/", "/commit/"):
            repo, sep, revision = rest.partition(kind)
            if sep:
                break
        else:
            return self._error(handler, True, 404, "RepoNotFound")
        if self._commit_or_refuse(handler, True, repo, revision) is None:
            return None
        if kind == "/preupload/":
            return reply({"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                    for f in json.loads(raw)["files"]]})
        files, message = dict(self.repos[repo]), ""
        for line in raw.decode().splitlines():
            entry = json.loads(line) if line.strip() else {}
            value = entry.get("value", {})
            if entry.get("key") == "header":
                message = value.get("summary", "")
            elif entry.get("key") == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif entry.get("key") == "deletedFile":
                files.pop(value["path"], None)
        self.repos[repo] = files
        oid = hashlib.sha1(raw).hexdigest()
        self.commits.append((repo, oid, message))
        return reply({"commitUrl": f"{self.url}/{repo}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None})

    @staticmethod
    def _sibling(name: str, data: bytes, blobs: bool) -> dict:
        if not blobs:
            return {"rfilename": name}
        sibling = {"rfilename": name, "size": len(data), "blobId": git_sha1(data)}
        if name.endswith(LFS_SUFFIXES):
            sibling["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return sibling

    def __enter__(self) -> "FakeHub":
        for server in (self.server, self.cdn):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        for server in (self.server, self.cdn):
            server.shutdown()
            server.server_close()
