"""Judge backends, the on-disk judgment cache, and running many judge calls at once.

Two backends: ``anthropic`` (the Messages API; the paper's judge is Claude Haiku
4.5) and ``openai`` (any OpenAI-compatible chat endpoint, a local llama.cpp
server included). Keys come only from environment variables and are never
written anywhere.

Unlike the reference, whose cache key was only component + case + answer text
(so a changed rubric or judge model silently reused old judgments, spec §13
#12), a cached judgment here is keyed by component, case id, answer text, the
full rubric prompt, the system instruction and the judge model. The cache is
an append-only JSONL file: a killed scoring run keeps every judgment it paid for.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from metrobench.errors import MetrobenchError
from metrobench.retry import backoff_delay, retry_after
from metrobench.scoring.rubrics import JUDGE_SYSTEM, JudgeTask, parse_reply

DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5-20251001"
MAX_TOKENS = 150


class Backend(Protocol):
    """Something that answers one (system, user) prompt pair with text."""

    model: str

    def complete(self, system: str, prompt: str) -> str: ...


class RetryableError(Exception):
    """A failure worth another attempt: HTTP 429, 5xx (529 included), connection errors,
    and an HTTP 200 whose body is not the API's reply shape (a proxy's HTML page, JSON
    without ``content`` or ``choices``)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _classify(exc: Exception, backend: str) -> Exception:
    """Map an SDK exception to :class:`RetryableError` or a user-facing error."""
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if status == 429 or (isinstance(status, int) and status >= 500) \
            or "Connection" in name or "Timeout" in name:
        return RetryableError(f"{backend}: {name} {status or ''}".strip(), retry_after(exc))
    if status is not None:
        body = getattr(exc, "message", "") or str(exc)
        return MetrobenchError(f"judge backend {backend}: HTTP {status}: {body[:300]}")
    return exc


def _malformed(backend: str, reply: Any, exc: Exception) -> RetryableError:
    """A 200 the SDK could not read (it hands back the body text when it is not JSON)."""
    what = "not JSON" if isinstance(reply, str) else f"{type(exc).__name__}: {exc}"
    return RetryableError(f"{backend}: malformed reply ({what})")


class AnthropicBackend:
    """Claude through the Messages API (``ANTHROPIC_API_KEY``; base URL overridable for tests)."""

    def __init__(self, model: str = DEFAULT_ANTHROPIC_MODEL, *, base_url: str | None = None,
                 api_key_env: str = "ANTHROPIC_API_KEY", timeout: float = 60.0) -> None:
        key = os.environ.get(api_key_env)
        if not key:
            raise MetrobenchError(f"judge backend anthropic: set the environment variable {api_key_env}")
        try:
            import anthropic
        except ImportError:
            raise MetrobenchError("judge backend anthropic needs the anthropic package: "
                                  "pip install 'metrobench[judge]'") from None
        self.model = model
        self._client = anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=0,
                                           timeout=timeout)

    def complete(self, system: str, prompt: str) -> str:
        try:
            # SDK 1.0 dropped the sampling keywords from create(); the API still takes
            # temperature for Haiku 4.5, so it travels in the body (greedy, as the paper judged).
            message = self._client.messages.create(
                model=self.model, max_tokens=MAX_TOKENS, system=system,
                messages=[{"role": "user", "content": prompt}], extra_body={"temperature": 0})
        except Exception as exc:  # noqa: BLE001 - sorted into retryable / fatal below
            raise _classify(exc, "anthropic") from None
        try:
            return "".join(block.text for block in message.content if getattr(block, "type", "") == "text")
        except (AttributeError, TypeError) as exc:
            raise _malformed("anthropic", message, exc) from None


class OpenAIBackend:
    """Any OpenAI-compatible chat endpoint (a local llama.cpp server, OpenAI, ...)."""

    def __init__(self, model: str, *, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0) -> None:
        try:
            import openai
        except ImportError:
            raise MetrobenchError("judge backend openai needs the openai package: "
                                  "pip install 'metrobench[judge]'") from None
        key = os.environ.get(api_key_env) or ("local" if base_url else None)
        if not key:
            raise MetrobenchError(f"judge backend openai: set {api_key_env} or give a base URL")
        self.model = model
        self._client = openai.OpenAI(api_key=key, base_url=base_url, max_retries=0, timeout=timeout)

    def complete(self, system: str, prompt: str) -> str:
        try:
            reply = self._client.chat.completions.create(
                model=self.model, temperature=0, max_tokens=MAX_TOKENS,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}])
        except Exception as exc:  # noqa: BLE001
            raise _classify(exc, "openai") from None
        try:
            content = reply.choices[0].message.content
        except (AttributeError, TypeError, IndexError, KeyError) as exc:
            raise _malformed("openai", reply, exc) from None
        return content if isinstance(content, str) else ""


def cache_key(task: JudgeTask, model: str, system: str = JUDGE_SYSTEM) -> str:
    material = json.dumps([task.component, task.case_id, task.response_text, task.prompt, system,
                           model], ensure_ascii=False)
    return hashlib.sha256(material.encode()).hexdigest()


class JudgeCache:
    """Judgments on disk, one JSON object per line; later lines win."""

    def __init__(self, path: Path | None) -> None:
        self.path = Path(path) if path else None
        self.entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        if self.path and self.path.exists():
            for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    self.entries[entry["key"]] = entry
                except (json.JSONDecodeError, KeyError, TypeError):
                    # an interrupted append leaves a partial last line: that judgment is redone
                    continue

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        entry = {"key": key, **entry}
        with self._lock:
            self.entries[key] = entry
            if self.path:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry, ensure_ascii=False) + "\n")


@dataclass
class Judge:
    """Runs judge tasks through a backend, with the cache, a concurrency limit and retries."""

    backend: Backend
    cache: JudgeCache = field(default_factory=lambda: JudgeCache(None))
    concurrency: int = 4
    max_attempts: int = 6
    base_delay: float = 1.0
    hits: int = 0
    misses: int = 0

    @property
    def model(self) -> str:
        return self.backend.model

    def _ask(self, task: JudgeTask) -> dict[str, Any]:
        for attempt in range(1, self.max_attempts + 1):
            try:
                raw = self.backend.complete(JUDGE_SYSTEM, task.prompt)
                break
            except RetryableError as exc:
                if attempt == self.max_attempts:
                    raise MetrobenchError(f"judge {exc} after {attempt} attempts "
                                          f"(case {task.case_id}, {task.component})") from None
                time.sleep(backoff_delay(attempt, self.base_delay, exc.retry_after))
        score, reason = parse_reply(raw)
        return {"score": score, "reason": reason, "raw": raw.strip()}

    def _resolve_one(self, task: JudgeTask) -> dict[str, Any]:
        key = cache_key(task, self.model)
        cached = self.cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        verdict = self._ask(task)
        self.cache.put(key, {"component": task.component, "case_id": task.case_id,
                             "judge_model": self.model, **verdict})
        return verdict

    def resolve(self, tasks: Sequence[JudgeTask]) -> list[dict[str, Any]]:
        """Verdicts ``{score, reason, raw}`` for ``tasks``, in order."""
        if not tasks:
            return []
        from concurrent.futures import ThreadPoolExecutor  # here: it imports logging, and Tier 1 needs neither

        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            return list(pool.map(self._resolve_one, tasks))


def make_judge(kind: str, *, model: str | None = None, base_url: str | None = None,
               api_key_env: str | None = None, cache_path: Path | None = None,
               concurrency: int = 4) -> Judge | None:
    """The judge for ``--judge none|anthropic|openai``."""
    if kind == "none":
        return None
    if kind == "anthropic":
        backend: Backend = AnthropicBackend(model or DEFAULT_ANTHROPIC_MODEL, base_url=base_url,
                                            api_key_env=api_key_env or "ANTHROPIC_API_KEY")
    elif kind == "openai":
        if not model:
            raise MetrobenchError("judge backend openai: name the model with --judge-model")
        backend = OpenAIBackend(model, base_url=base_url, api_key_env=api_key_env or "OPENAI_API_KEY")
    else:
        raise MetrobenchError(f"unknown judge {kind!r}: use none, anthropic or openai")
    return Judge(backend, JudgeCache(cache_path), concurrency=concurrency)
