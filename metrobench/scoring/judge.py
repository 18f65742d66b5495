"""Judge backends, the on-disk judgment cache, and running many judge calls at once.

Two backends: ``anthropic`` (the Messages API; the paper's judge is Claude Haiku
4.5) and ``openai`` (any OpenAI-compatible chat endpoint, a local llama.cpp
server included). Keys come only from environment variables and are never
written anywhere.

Unlike the reference, whose cache key was only component + case + answer text
(so a changed rubric or judge model silently reused old judgments, spec §13
#12), a cached judgment here is keyed by component, case id, answer text, the
full rubric prompt, the system instruction and the judge model, and, for a judge at another
endpoint than its provider's own (``--judge-url``, or the SDK's ``*_BASE_URL`` variable), by the
judge's identity too (:class:`JudgeIdentity`: provider, endpoint as ``scheme://host:port``, served
model): a stand-in tried under a name and a real judge at another URL under the same name never
share a judgment (issue 51). An entry written before identities were keyed reads as before and is
reused only by a judge at its provider's own endpoint, the one the name alone meant. The cache is
an append-only JSONL file: a killed scoring run keeps every judgment it paid for.
A line it cannot use (cut by a killed writer, not UTF-8, not JSON, no verdict) is
skipped with one warning naming the file and its lines, and that judgment is asked
again; every other line is kept, and an append after a cut line starts a new line. A new entry also holds ``usage``
(``input_tokens``, ``output_tokens``) where the judge's endpoint reported the tokens it
billed (:mod:`metrobench.paper.deployment` counts the judge's cost from them); older
entries without it read as before.

Every request has a total deadline (``timeout`` seconds from sending to the last
byte), not only a per-read one: a server trickling its reply a byte at a time is cut
off and retried like any timeout; ``--judge-timeout`` and ``--judge-attempts`` set the deadline
and the tries (defaults 60 s anthropic, 120 s openai; 6 tries). A judge that keeps every request
waiting (an endpoint that accepts and never answers) is named after a few seconds
(:attr:`Judge.notice_s`): what is waited for, how many requests, and how long it may take, so the
silence has a reason and a remedy. The backends run the SDKs' async clients on one
event-loop thread of their own for this. A reply's lone surrogates (``"\\ud800"``,
which no UTF-8 writer accepts) become U+FFFD; a key a server quotes in an error is
replaced by ``***``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sys
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from metrobench.credentials import env_name_problem, scrub, url_problem
from metrobench.errors import MetrobenchError, not_utf8
from metrobench.retry import backoff_delay, retry_after
from metrobench.scoring.rubrics import JUDGE_SYSTEM, JudgeTask, parse_reply, reply_parsed

DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5-20251001"
MAX_TOKENS = 150
#: Each backend's deadline per request (seconds, sending to the last byte) and the tries per judgment.
DEFAULT_TIMEOUT_S = {"anthropic": 60.0, "openai": 120.0}
DEFAULT_ATTEMPTS = 6


class Backend(Protocol):
    """Something that answers one (system, user) prompt pair with text (a backend may also carry an
    ``identity``, :class:`JudgeIdentity`; one without, an in-process grader, is keyed by its model)."""

    model: str

    def complete(self, system: str, prompt: str) -> str: ...


#: Each provider's own endpoint (the SDK's default) and the variable the SDK reads to replace it.
DEFAULT_ENDPOINTS = {"anthropic": ("https://api.anthropic.com", "ANTHROPIC_BASE_URL"),
                     "openai": ("https://api.openai.com/v1", "OPENAI_BASE_URL")}


def endpoint_of(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port spelled out, host lower-case; no path, no credentials)."""
    parts = urllib.parse.urlsplit(url.strip())
    scheme = (parts.scheme or "http").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or (443 if scheme == "https" else 80)
    host = (parts.hostname or "").lower()
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


@dataclass(frozen=True)
class JudgeIdentity:
    """Which judge answered: its provider, endpoint (``scheme://host:port``) and served model.

    ``default``: the provider's own endpoint (no ``--judge-url`` and no ``*_BASE_URL``), whose
    judgments a cache written before identities were keyed may hold under the model name alone."""

    provider: str
    endpoint: str
    model: str
    default: bool

    @classmethod
    def of(cls, provider: str, model: str, base_url: str | None) -> JudgeIdentity:
        """The identity of ``provider``'s judge ``model`` at ``base_url`` (None: as the SDK resolves it)."""
        own, variable = DEFAULT_ENDPOINTS[provider]
        url = base_url or os.environ.get(variable) or own
        endpoint = endpoint_of(url)
        return cls(provider, endpoint, model, endpoint == endpoint_of(own))

    def key_part(self) -> str | None:
        """What the cache key adds for this judge: nothing at the provider's own endpoint (old keys
        stay valid there), else provider and endpoint."""
        return None if self.default else f"{self.provider} {self.endpoint}"

    def __str__(self) -> str:
        return f"{self.model} ({self.provider} at {self.endpoint})"


class JudgeText(str):
    """A backend's reply text, with the tokens its endpoint billed for it (``usage``; None: not reported)."""

    usage: dict[str, int] | None = None

    @classmethod
    def of(cls, text: str, input_tokens: Any, output_tokens: Any) -> "JudgeText":
        reply = cls(text)
        if isinstance(input_tokens, int) and isinstance(output_tokens, int):
            reply.usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        return reply


class RetryableError(Exception):
    """A failure worth another attempt: HTTP 429, 5xx (529 included), connection errors,
    and an HTTP 200 whose body is not the API's reply shape (a proxy's HTML page, JSON
    without ``content`` or ``choices``)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """``text`` with lone surrogates (a JSON ``"\\ud800"``; not encodable as UTF-8) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def _classify(exc: Exception, backend: str, key: str | None = None) -> Exception:
    """Map an SDK exception to :class:`RetryableError` or a user-facing error (``key`` never quoted)."""
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if status == 429 or (isinstance(status, int) and status >= 500) \
            or "Connection" in name or "Timeout" in name:
        return RetryableError(f"{backend}: {name} {status or ''}".strip(), retry_after(exc))
    if status is not None:
        body = scrub(without_surrogates(getattr(exc, "message", "") or str(exc)), key)
        return MetrobenchError(f"judge backend {backend}: HTTP {status}: {body[:300]}")
    return exc


class _Deadline:
    """Async requests under a total deadline, run on an event-loop thread of their own.

    The SDKs' timeouts bound each read, so a reply trickled a byte at a time never
    times out; ``asyncio.wait_for`` bounds the whole request and cancels it (the
    connection is closed) when the deadline passes. Callers on any thread block on
    :meth:`call`; the async client is made once, on the loop, and shared.
    """

    def __init__(self, make_client: Callable[[], Any], total_s: float) -> None:
        self.total_s = total_s
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="judge-http", daemon=True).start()
        self._client = self._submit(self._make(make_client))

    @staticmethod
    async def _make(make_client: Callable[[], Any]) -> Any:
        return make_client()

    def _submit(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    def call(self, request: Callable[[Any], Awaitable[Any]], backend: str) -> Any:
        """``request(client)``'s result; :class:`RetryableError` when it outlives the deadline."""
        try:
            return self._submit(asyncio.wait_for(request(self._client), self.total_s))
        except TimeoutError:
            raise RetryableError(f"{backend}: no complete reply within {self.total_s:g} s") from None


def _malformed(backend: str, reply: Any, exc: Exception) -> RetryableError:
    """A 200 the SDK could not read (it hands back the body text when it is not JSON)."""
    what = "not JSON" if isinstance(reply, str) else f"{type(exc).__name__}: {exc}"
    return RetryableError(f"{backend}: malformed reply ({what})")


def _connect(backend: Any, provider: str, model: str, base_url: str | None, key: str, timeout: float,
             sdk_client: Callable[..., Any]) -> None:
    """A backend's model, identity and key, and its SDK client (made on first use, retries off: the
    judge's own retry rules apply)."""
    backend.model = model
    backend.timeout_s = timeout
    backend.identity = JudgeIdentity.of(provider, model, base_url)
    backend._key = key
    backend._http = _Deadline(lambda: sdk_client(api_key=key, base_url=base_url, max_retries=0, timeout=timeout),
                              timeout)


class AnthropicBackend:
    """Claude through the Messages API (``ANTHROPIC_API_KEY``; base URL overridable for tests)."""

    def __init__(self, model: str = DEFAULT_ANTHROPIC_MODEL, *, base_url: str | None = None,
                 api_key_env: str = "ANTHROPIC_API_KEY", timeout: float | None = None) -> None:
        timeout = timeout or DEFAULT_TIMEOUT_S["anthropic"]
        _check_endpoint("anthropic", base_url, api_key_env)
        key = os.environ.get(api_key_env)
        if not key:
            raise MetrobenchError(f"judge backend anthropic: set the environment variable {api_key_env}")
        try:
            import anthropic
        except ImportError:
            raise MetrobenchError("judge backend anthropic needs the anthropic package: "
                                  "pip install 'metrobench[judge]'") from None
        _connect(self, "anthropic", model, base_url, key, timeout, anthropic.AsyncAnthropic)

    def complete(self, system: str, prompt: str) -> str:
        # SDK 1.0 dropped the sampling keywords from create(); the API still takes
        # temperature for Haiku 4.5, so it travels in the body (greedy, as the paper judged).
        message = _send(self._http, "anthropic", self._key, lambda client: client.messages.create(
            model=self.model, max_tokens=MAX_TOKENS, system=system,
            messages=[{"role": "user", "content": prompt}], extra_body={"temperature": 0}))
        try:
            text = "".join(block.text for block in message.content if getattr(block, "type", "") == "text")
        except (AttributeError, TypeError) as exc:
            raise _malformed("anthropic", message, exc) from None
        usage = getattr(message, "usage", None)
        return JudgeText.of(without_surrogates(text), getattr(usage, "input_tokens", None),
                            getattr(usage, "output_tokens", None))


class OpenAIBackend:
    """Any OpenAI-compatible chat endpoint (a local llama.cpp server, OpenAI, ...)."""

    def __init__(self, model: str, *, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout: float | None = None) -> None:
        timeout = timeout or DEFAULT_TIMEOUT_S["openai"]
        try:
            import openai
        except ImportError:
            raise MetrobenchError("judge backend openai needs the openai package: "
                                  "pip install 'metrobench[judge]'") from None
        _check_endpoint("openai", base_url, api_key_env)
        key = os.environ.get(api_key_env) or ("local" if base_url else None)
        if not key:
            raise MetrobenchError(f"judge backend openai: set {api_key_env} or give a base URL")
        _connect(self, "openai", model, base_url, key, timeout, openai.AsyncOpenAI)

    def complete(self, system: str, prompt: str) -> str:
        reply = _send(self._http, "openai", self._key, lambda client: client.chat.completions.create(
            model=self.model, temperature=0, max_tokens=MAX_TOKENS,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}]))
        try:
            content = reply.choices[0].message.content
        except (AttributeError, TypeError, IndexError, KeyError) as exc:
            raise _malformed("openai", reply, exc) from None
        usage = getattr(reply, "usage", None)
        return JudgeText.of(without_surrogates(content) if isinstance(content, str) else "",
                            getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None))


def _check_endpoint(backend: str, base_url: str | None, api_key_env: str) -> None:
    """Refuse a key given as the variable's name, or a URL with credentials, never quoting either."""
    problem = env_name_problem(api_key_env)
    if problem:
        raise MetrobenchError(f"judge backend {backend}: judge key env: {problem}")
    problem = url_problem(base_url) if base_url is not None else None
    if problem:
        raise MetrobenchError(f"judge backend {backend}: judge URL: {problem}")


def _send(http: _Deadline, backend: str, key: str, request: Callable[[Any], Awaitable[Any]]) -> Any:
    """One request through the SDK under the total deadline; its failures sorted by :func:`_classify`."""
    try:
        return http.call(request, backend)
    except RetryableError:
        raise
    except Exception as exc:  # noqa: BLE001 - sorted into retryable / fatal
        raise _classify(exc, backend, key) from None


def cache_key(task: JudgeTask, model: str, system: str = JUDGE_SYSTEM, identity: str | None = None) -> str:
    """The judgment's key: what was asked, of which model, and (``identity``,
    :meth:`JudgeIdentity.key_part`) at which endpoint when not the provider's own."""
    fields = [task.component, task.case_id, task.response_text, task.prompt, system, model]
    material = json.dumps(fields if identity is None else [*fields, identity], ensure_ascii=False)
    # surrogatepass: an answer holding a lone surrogate still has a key (others' bytes are unchanged)
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


#: What a cached line must hold to stand for a judgment.
VERDICT_FIELDS = ("key", "score", "reason", "raw")


def cache_entry(line: bytes) -> tuple[dict[str, Any] | None, str]:
    """One cache line as an entry, else None and why it cannot be used."""
    try:
        entry = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, not_utf8(exc)
    except json.JSONDecodeError:
        return None, "not a JSON object (cut by an interrupted write?)"
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
        return None, "no cache key"
    missing = [name for name in VERDICT_FIELDS if name not in entry]
    return (None, f"no {', '.join(missing)}") if missing else (entry, "")


def read_cache(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
    """A judge cache file's usable entries with their line numbers, in file order, and why each
    other non-blank line cannot be used (``line N: ...``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MetrobenchError(f"{path}: judge cache unreadable ({exc.strerror or exc})") from None
    lines: list[tuple[int, dict[str, Any]]] = []
    skipped: list[str] = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        entry, problem = cache_entry(line)
        if entry is None:
            skipped.append(f"line {number}: {problem}")
        else:
            lines.append((number, entry))
    return lines, skipped


def skipped_lines(skipped: list[str]) -> str:
    """The warning's words for unusable cache lines: how many, and the first three reasons."""
    shown = "; ".join(skipped[:3]) + (f"; {len(skipped) - 3} more" if len(skipped) > 3 else "")
    return f"{len(skipped)} unusable judge-cache line{'s' if len(skipped) > 1 else ''} skipped ({shown})"


class JudgeCache:
    """Judgments on disk, one JSON object per line; later lines win; unusable lines skipped with a warning."""

    def __init__(self, path: Path | None) -> None:
        self.path = Path(path) if path else None
        self.entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        if self.path and self.path.exists():
            self._load(self.path)

    def _load(self, path: Path) -> None:
        lines, skipped = read_cache(path)
        for _, entry in lines:
            self.entries[entry["key"]] = entry
        if skipped:
            print(f"metrobench: warning: {path}: {skipped_lines(skipped)}; those judgments are asked again",
                  file=sys.stderr)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        entry = {"key": key, **entry}
        text = json.dumps(entry, ensure_ascii=False)
        try:
            line = text.encode("utf-8") + b"\n"
        except UnicodeEncodeError:  # a lone surrogate: JSON's \\u escape keeps it exactly
            line = json.dumps(entry).encode("ascii") + b"\n"
        with self._lock:
            self.entries[key] = entry
            if self.path:
                self._append(self.path, line)

    @staticmethod
    def _append(path: Path, line: bytes) -> None:
        """Append one line; after a line cut by a killed writer, start a new line first."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size and os.pread(fh.fileno(), 1, size - 1) != b"\n":
                line = b"\n" + line
            fh.write(line)


@dataclass
class Judge:
    """Runs judge tasks through a backend, with the cache, a concurrency limit and retries."""

    backend: Backend
    cache: JudgeCache = field(default_factory=lambda: JudgeCache(None))
    concurrency: int = 4
    max_attempts: int = DEFAULT_ATTEMPTS
    base_delay: float = 1.0
    #: Seconds without a reply, requests waiting, before one line says what is waited for.
    notice_s: float = 5.0
    notice: Callable[[str], None] | None = None
    hits: int = 0
    misses: int = 0
    #: Verdicts resolved (cached or new), and those whose reply had no ``Score: N`` to read (scored 1).
    judged: int = 0
    unparsed: int = 0

    @property
    def model(self) -> str:
        return self.backend.model

    @property
    def identity(self) -> JudgeIdentity | None:
        """The backend's :class:`JudgeIdentity` (None: an in-process grader, keyed by its model)."""
        return getattr(self.backend, "identity", None)

    def describe(self) -> str:
        """The judge as ``score`` names it: its model and, where known, provider and endpoint."""
        return str(self.identity) if self.identity is not None else self.model

    def _ask(self, task: JudgeTask) -> dict[str, Any]:
        for attempt in range(1, self.max_attempts + 1):
            with self._lock:
                self._waiting[id(task)] = task
            try:
                raw = self.backend.complete(JUDGE_SYSTEM, task.prompt)
                break
            except RetryableError as exc:
                if attempt == self.max_attempts:
                    raise MetrobenchError(f"judge {exc} after {attempt} attempts "
                                          f"(case {task.case_id}, {task.component})") from None
                time.sleep(backoff_delay(attempt, self.base_delay, exc.retry_after))
            finally:
                with self._lock:
                    self._waiting.pop(id(task), None)
                    self._replies += 1
        score, reason = parse_reply(raw)
        verdict: dict[str, Any] = {"score": score, "reason": reason, "raw": raw.strip()}
        usage = getattr(raw, "usage", None)
        return verdict if usage is None else {**verdict, "usage": usage}

    def _resolve_one(self, task: JudgeTask) -> dict[str, Any]:
        identity = self.identity
        key = cache_key(task, self.model, identity=identity.key_part() if identity is not None else None)
        cached = self.cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        verdict = self._ask(task)
        where = {} if identity is None else {"judge_provider": identity.provider, "judge_endpoint": identity.endpoint}
        self.cache.put(key, {"component": task.component, "case_id": task.case_id,
                             "judge_model": self.model, **where, **verdict})
        return verdict

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[int, JudgeTask] = {}   # requests sent and not answered (nor failed) yet
        self._replies = 0                          # answers and failures so far

    def waiting_line(self, seconds: float) -> str:
        """What a stalled judge is waiting for: the judge, the requests, and how long they may take."""
        with self._lock:
            waiting = list(self._waiting.values())
        first = f" (first: case {waiting[0].case_id}, {waiting[0].component})" if waiting else ""
        timeout = getattr(self.backend, "timeout_s", None)
        bound = (f"; each request may take up to {timeout:g} s, tried up to {self.max_attempts} times "
                 "(--judge-timeout, --judge-attempts)") if timeout else ""
        return (f"metrobench: note: judge {self.describe()}: no reply for {seconds:g} s, {len(waiting)} "
                f"request{'' if len(waiting) == 1 else 's'} waiting{first}{bound}")

    def _watch(self, done: threading.Event) -> None:
        """Say once per silence what is waited for: no reply for :attr:`notice_s` while requests wait."""
        notice = self.notice or (lambda line: print(line, file=sys.stderr, flush=True))
        said_at = -1
        while True:
            replies = self._replies
            if done.wait(self.notice_s):
                return
            with self._lock:
                silent = self._replies == replies and bool(self._waiting)
            if silent and replies != said_at:
                notice(self.waiting_line(self.notice_s))
                said_at = replies

    def resolve(self, tasks: Sequence[JudgeTask]) -> list[dict[str, Any]]:
        """Verdicts ``{score, reason, raw}`` for ``tasks``, in order."""
        if not tasks:
            return []
        from concurrent.futures import ThreadPoolExecutor  # here: it imports logging, and Tier 1 needs neither

        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(done,), name="judge-watch", daemon=True)
        watcher.start()
        try:
            with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
                verdicts = list(pool.map(self._resolve_one, tasks))
        finally:
            done.set()
            watcher.join()
        self.judged += len(verdicts)
        # a cache entry from before ``raw`` was kept counts as read
        self.unparsed += sum(not reply_parsed(v["raw"]) for v in verdicts if isinstance(v.get("raw"), str))
        return verdicts


def make_judge(kind: str, *, model: str | None = None, base_url: str | None = None,
               api_key_env: str | None = None, cache_path: Path | None = None,
               concurrency: int = 4, timeout_s: float | None = None,
               attempts: int | None = None) -> Judge | None:
    """The judge for ``--judge none|anthropic|openai``; ``timeout_s`` (``--judge-timeout``) and
    ``attempts`` (``--judge-attempts``): each request's deadline and the tries per judgment (None:
    :data:`DEFAULT_TIMEOUT_S`, :data:`DEFAULT_ATTEMPTS`)."""
    if kind == "none":
        return None
    if kind == "anthropic":
        backend: Backend = AnthropicBackend(model or DEFAULT_ANTHROPIC_MODEL, base_url=base_url,
                                            api_key_env=api_key_env or "ANTHROPIC_API_KEY", timeout=timeout_s)
    elif kind == "openai":
        if not model:
            raise MetrobenchError("judge backend openai: name the model with --judge-model")
        backend = OpenAIBackend(model, base_url=base_url, api_key_env=api_key_env or "OPENAI_API_KEY",
                                timeout=timeout_s)
    else:
        raise MetrobenchError(f"unknown judge {kind!r}: use none, anthropic or openai")
    return Judge(backend, JudgeCache(cache_path), concurrency=concurrency,
                 max_attempts=attempts or DEFAULT_ATTEMPTS)
