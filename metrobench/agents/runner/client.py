"""One chat request to a model endpoint, in that endpoint's dialect, with retries.

Every dialect answers in the same chat shape (an assistant message with
``content``, ``tool_calls`` and, where the server reasons aloud,
``reasoning_content``), which is what the loop appends, records and scores:

* ``llama_cpp`` — a local llama.cpp server (``max_tokens``; thinking on/off via
  ``chat_template_kwargs``; top_k/min_p in the body);
* ``openai`` — the OpenAI API (``max_completion_tokens``, ``reasoning_effort``);
* ``azure`` — Azure OpenAI chat completions (``api-key`` header, ``api-version``);
* ``azure_responses`` — Azure's Responses API, converted to and from the chat shape;
* ``mistral`` — Mistral's chat API (``max_tokens``; the sampling seed as ``random_seed``).

The sampling ``seed`` (a repeated run's: :meth:`ModelConfig.for_repeat`) is sent as
``seed`` to the chat dialects that take one and as ``random_seed`` to Mistral; the
Responses API takes none, so it is not sent there.

How a failure ends is the run's protocol (:mod:`metrobench.agents.runner.protocol`): by
default the reference's. 429 is retried (``retries`` attempts, ``backoff_s`` doubled: 1, 2, 4,
8 s); every other HTTP status, a round with no complete reply within ``timeout_s`` and an
HTTP 200 that is not a reply raise :class:`EndpointError` as the case's own ending, recorded
and scored (the reference's ``"<status>: <body[:500]>"`` text; ``timeout: ...``;
``malformed reply: ...``). With the ``retry`` option, 408, 5xx, time-outs and malformed replies
are retried too (backoff with jitter, ``retry-after`` honoured) before they end the case.
Every request has a total deadline of ``timeout_s`` (the SDK's own timeout applies per read,
so a server that trickles its reply would otherwise hold a request open for ever).

The infrastructure's failures (:attr:`EndpointError.infrastructure`) are the endpoint not
being there: connection refused or reset, a connection not accepted within
:data:`~metrobench.agents.runner.protocol.CONNECT_TIMEOUT_S`, 401/403 (the key) and 404 (the
model, deployment or path). Connection failures are retried; what still fails is redone by a
rerun, and the run fails. A 400 saying the conversation outgrew the server's context
(llama-server's ``exceed_context_size_error``) is marked as such (:attr:`EndpointError.context`:
the prompt's tokens and the context, where the body gives them), so the case ends as
``context``, not as the model's doing.

401, 403 and 404 are not retried and stop the run (:attr:`ChatClient.stopped`); so does an
endpoint that never answered at all. Until the endpoint has answered once (any HTTP answer,
or a connection it accepted and then kept silent on), requests go one at a time, so a wrong
key or a dead server costs one request (and its retries), not one per case: later calls raise
:class:`RunStopped`. Each reply carries the failures retried before it (:attr:`ChatReply.retried`),
which the loop records on the case.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from metrobench.credentials import is_loopback, scrub
from metrobench.errors import MetrobenchError
from metrobench.retry import backoff_delay, retry_after
from metrobench.transcripts.records import context_exceeded
from metrobench.agents.runner.config import ModelConfig
from metrobench.agents.runner.protocol import CONNECT_TIMEOUT_S
from metrobench.agents.runner.replies import ChatReply, MalformedReply, chat_reply, parse_body, responses_reply

#: The status the reference retries (its only one); with the ``retry`` option also :data:`TRANSIENT` and 5xx.
RATE_LIMITED = 429
#: Statuses the ``retry`` option retries besides 5xx (the endpoint is busy for now).
TRANSIENT = frozenset({408, 429})
#: Statuses that no retry or later request will cure: the key, or the model/deployment/path.
FATAL = {401: "the endpoint refused the key", 403: "the endpoint refused the key",
         404: "the endpoint knows no such model, deployment or path"}


class EndpointError(Exception):
    """A request that failed for good.

    ``infrastructure``: the endpoint's fault, not the model's, so the case is
    redone by a later run (``retryable``); ``stop`` (``fatal``): why no later
    request can succeed either (a refused key, an unknown model, a server never reached).
    """

    def __init__(self, message: str, *, infrastructure: bool, stop: str | None = None,
                 context: dict[str, int] | None = None, ending: str | None = None) -> None:
        super().__init__(message)
        self.infrastructure = infrastructure
        self.stop = stop  # why the run cannot go on, for a fatal error
        #: For a prompt longer than the server's context: ``{"n_prompt_tokens", "n_ctx"}`` as the
        #: server reported them (empty where it did not); None for any other failure.
        self.context = context
        #: The case's ending where the failure names one (``timeout``, ``malformed``); None: derived
        #: from the kind (``infrastructure``) or the text (an HTTP status: ``refused``).
        self.ending = ending
        #: The failures retried before this one (:attr:`ChatReply.retried`).
        self.retried: list[str] = []

    @property
    def fatal(self) -> bool:
        return self.stop is not None

    @property
    def retryable(self) -> bool:
        return self.infrastructure


class RunStopped(EndpointError):
    """The run was stopped by another request's failure (:attr:`ChatClient.stopped`); nothing was sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message, infrastructure=True)


def _api_key(cfg: ModelConfig, url: str | None) -> str:
    """The key sent: from ``api_key_env``; without one, a placeholder for a local server (llama.cpp, or
    an OpenAI-compatible endpoint on a loopback address, as the openai judge allows a keyless URL)."""
    if cfg.api_key_env:
        key = os.environ.get(cfg.api_key_env)
        if not key:
            raise MetrobenchError(f"model {cfg.name}: set the environment variable {cfg.api_key_env}")
        return key
    if cfg.provider == "llama_cpp" or (cfg.provider == "openai" and url and is_loopback(url)):
        return "local"
    where = " (or a base_url on 127.0.0.1, localhost or ::1)" if cfg.provider == "openai" else ""
    raise MetrobenchError(f"model {cfg.name}: provider {cfg.provider} needs api_key_env{where}")


def _host(url: str) -> str:
    """``scheme://host:port`` of an endpoint URL (never its path, query or credentials)."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{parts.hostname}{port}"


def _split_version(url: str, version: str | None) -> tuple[str, str | None]:
    """An Azure URL may carry ``?api-version=``: move it to the client's api_version."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if "api-version" in query:
        version = version or query["api-version"][0]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), version


def responses_input(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat messages -> (instructions, Responses API input items)."""
    instructions = None
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            instructions = message.get("content") or ""
        elif role == "user":
            items.append({"role": "user", "content": message.get("content") or ""})
        elif role == "assistant":
            if message.get("responses_output"):
                items.extend(message["responses_output"])  # reasoning items travel back as given
                continue
            if message.get("content"):
                items.append({"role": "assistant", "content": message["content"]})
            for call in message.get("tool_calls") or []:
                items.append({"type": "function_call", "call_id": call["id"],
                              "name": call["function"]["name"],
                              "arguments": call["function"]["arguments"]})
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                          "output": message.get("content") or ""})
    return instructions, items


def responses_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "name": t["function"]["name"],
             "description": t["function"].get("description", ""),
             "parameters": t["function"]["parameters"]} for t in tools]


def context_overflow(message: str, body: str) -> dict[str, int] | None:
    """What a refused request's body says of a prompt over the server's context, or None.

    llama-server answers such a request with HTTP 400 and ``{"error": {"type":
    "exceed_context_size_error", "message": ..., "n_prompt_tokens": N, "n_ctx": C}}``
    (``C`` is one slot's context); the counts are kept where the body has them as integers.
    """
    if not context_exceeded(message):
        return None
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError, RecursionError):
        error = None
    if not isinstance(error, dict):
        return {}
    return {key: error[key] for key in ("n_prompt_tokens", "n_ctx")
            if isinstance(error.get(key), int) and not isinstance(error.get(key), bool)}


class ChatClient:
    """Requests to one endpoint; create one per run and share it between cases."""

    def __init__(self, cfg: ModelConfig, *, base_url: str | None = None) -> None:
        try:
            import openai
        except ImportError:
            raise MetrobenchError("the runner needs the openai package: pip install 'metrobench[serve]'") from None
        self.cfg = cfg
        self._openai = openai
        url = base_url or cfg.base_url
        if not url and cfg.provider in ("llama_cpp", "azure", "azure_responses"):
            raise MetrobenchError(f"model {cfg.name}: give the endpoint with --base-url or base_url")
        #: Whether the endpoint has given any HTTP answer yet (until then, one request at a time).
        self.answered = False
        #: Why no further request is sent (a fatal :class:`EndpointError`'s text), once one happened.
        self.stopped: str | None = None
        self._probing = False
        self._turn = asyncio.Event()
        self.where = _host(url) if url else cfg.provider
        key = _api_key(cfg, url)
        self._key = key   # only to scrub it from an error body that quotes it back
        # a connection not accepted within CONNECT_TIMEOUT_S is an endpoint that is not there
        timeout = openai.Timeout(cfg.timeout_s, connect=min(cfg.timeout_s, CONNECT_TIMEOUT_S))
        common = {"max_retries": 0, "timeout": timeout}
        if cfg.provider in ("azure", "azure_responses"):
            url, version = _split_version(url, cfg.api_version)
            if version:
                self.client = openai.AsyncAzureOpenAI(base_url=url, api_version=version, api_key=key, **common)
            else:  # Azure's v1 API: OpenAI paths, api-key header
                self.client = openai.AsyncOpenAI(base_url=url, api_key=key,
                                                 default_headers={"api-key": key}, **common)
        else:
            if cfg.provider == "mistral" and not url:
                url = "https://api.mistral.ai/v1"
            self.client = openai.AsyncOpenAI(base_url=url, api_key=key, **common)

    def chat_kwargs(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The request body for the chat dialects (everything but the transport)."""
        cfg = self.cfg
        kwargs: dict[str, Any] = {"model": cfg.served_model, "messages": messages, "tools": tools}
        if cfg.tool_choice is not None:
            kwargs["tool_choice"] = cfg.tool_choice
        if cfg.temperature is not None:
            kwargs["temperature"] = cfg.temperature
        if cfg.top_p is not None:
            kwargs["top_p"] = cfg.top_p
        if cfg.seed is not None and cfg.provider != "mistral":
            kwargs["seed"] = cfg.seed
        if cfg.provider in ("openai", "azure"):
            kwargs["max_completion_tokens"] = cfg.max_tokens
        else:
            kwargs["max_tokens"] = cfg.max_tokens
        if cfg.reasoning_effort:
            kwargs["reasoning_effort"] = cfg.reasoning_effort
        extra: dict[str, Any] = {}
        if cfg.seed is not None and cfg.provider == "mistral":
            extra["random_seed"] = cfg.seed
        if cfg.top_k is not None:
            extra["top_k"] = cfg.top_k
        if cfg.min_p is not None:
            extra["min_p"] = cfg.min_p
        template = dict(cfg.chat_template_kwargs)
        if cfg.thinking is not None and cfg.provider == "llama_cpp":
            template.setdefault("enable_thinking", cfg.thinking)
        if template:
            extra["chat_template_kwargs"] = template
        extra.update(cfg.extra_body)
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def responses_kwargs(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        cfg = self.cfg
        instructions, items = responses_input(messages)
        kwargs: dict[str, Any] = {"model": cfg.served_model, "input": items, "tools": responses_tools(tools),
                                  "max_output_tokens": cfg.max_tokens}
        if instructions is not None:
            kwargs["instructions"] = instructions
        if cfg.temperature is not None:
            kwargs["temperature"] = cfg.temperature
        if cfg.top_p is not None:
            kwargs["top_p"] = cfg.top_p
        if cfg.reasoning_effort:
            kwargs["reasoning"] = {"effort": cfg.reasoning_effort, "summary": "auto"}
        if cfg.extra_body:
            kwargs["extra_body"] = dict(cfg.extra_body)
        return kwargs

    async def _once(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ChatReply:
        """One request, read whole within the total deadline; any HTTP answer marks the endpoint alive."""
        async with asyncio.timeout(self.cfg.timeout_s):
            if self.cfg.provider == "azure_responses":
                raw = await self.client.responses.with_raw_response.create(
                    **self.responses_kwargs(messages, tools))
            else:
                raw = await self.client.chat.completions.with_raw_response.create(
                    **self.chat_kwargs(messages, tools))
            text = raw.text
        self._mark_answered()
        read = responses_reply if self.cfg.provider == "azure_responses" else chat_reply
        return read(parse_body(text))

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ChatReply:
        """One model turn, retried on transient failures; one request at a time until the endpoint answers."""
        while not self.answered:
            self._check_stopped()
            if self._probing:  # another request is finding out whether the endpoint is there
                await self._turn.wait()
                continue
            self._probing = True
            try:
                return await self._attempts(messages, tools)
            finally:
                self._probing = False
                self._wake()
        self._check_stopped()
        return await self._attempts(messages, tools)

    def _wake(self) -> None:
        """Let the requests waiting for the first answer go on (or find the run stopped)."""
        self._turn.set()
        self._turn = asyncio.Event()

    def _mark_answered(self) -> None:
        if not self.answered:
            self.answered = True
            self._wake()

    def _check_stopped(self) -> None:
        if self.stopped is not None:
            raise RunStopped(f"run stopped: {self.stopped}")

    async def _attempts(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ChatReply:
        attempts = max(1, self.cfg.retries)
        retried: list[str] = []
        for attempt in range(1, attempts + 1):
            start = time.perf_counter()
            try:
                reply = await self._once(messages, tools)
                reply.elapsed_ms = (time.perf_counter() - start) * 1000
                reply.retried = retried
                return reply
            except Exception as exc:  # noqa: BLE001 - sorted below; anything unknown is re-raised
                failure, label, server_says = self._sort(exc, final=attempt == attempts)
            if failure is not None:
                if failure.stop is not None:
                    self.stopped = failure.stop
                failure.retried = retried
                raise failure
            retried.append(label)
            await asyncio.sleep(self._delay(attempt, label, server_says))
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, label: str, server_says: float | None) -> float:
        """Seconds before the next attempt: the reference's plain doubling for its 429 retries
        (1, 2, 4, 8 s at ``backoff_s`` 1), else backoff with jitter honouring ``retry-after``."""
        if label == str(RATE_LIMITED) and not self.cfg.protocol.retry:
            return self.cfg.backoff_s * 2 ** (attempt - 1)
        return backoff_delay(attempt, self.cfg.backoff_s, server_says)

    def _sort(self, exc: Exception, *, final: bool) -> tuple[EndpointError | None, str, float | None]:
        """``(the error to raise now or None to retry, the failure's label, the server's retry-after)``."""
        openai = self._openai
        retry = self.cfg.protocol.retry
        if isinstance(exc, openai.APIStatusError):
            self._mark_answered()
            status = exc.status_code
            body = exc.response.text if exc.response is not None else str(exc)
            message = f"{status}: {scrub(body, self._key)[:500]}"  # a 401 body may quote the key
            if status in FATAL:
                why = f"{FATAL[status]} ({' '.join(message.split())[:200]})"
                return EndpointError(message, infrastructure=True, stop=why), str(status), None
            again = status == RATE_LIMITED or (retry and (status in TRANSIENT or status >= 500))
            if again and not final:
                return None, str(status), retry_after(exc)
            return (EndpointError(message, infrastructure=False, context=context_overflow(message, body)),
                    str(status), None)
        if isinstance(exc, (openai.APITimeoutError, TimeoutError)) and not _connecting(exc):
            self._mark_answered()  # the server took the request and kept silent: it is there
            if retry and not final:
                return None, "timeout", None
            message = f"timeout: no complete reply within {self.cfg.timeout_s:g} s (timeout_s)"
            return EndpointError(message, infrastructure=False, ending="timeout"), "timeout", None
        if isinstance(exc, (openai.APIConnectionError, TimeoutError)):
            message = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, openai.APITimeoutError):
                message = f"connection not accepted within {min(self.cfg.timeout_s, CONNECT_TIMEOUT_S):g} s"
            if not final:
                return None, "connection", None
            if not self.answered:  # never reached: every other request would fail the same way
                why = f"the endpoint {self.where} never answered ({message}, {self.cfg.retries} attempts)"
                return EndpointError(message, infrastructure=True, stop=why), "connection", None
            return EndpointError(message, infrastructure=True), "connection", None
        if isinstance(exc, MalformedReply):
            if retry and not final:
                return None, "malformed", None
            return EndpointError(f"malformed reply: {exc}", infrastructure=False, ending="malformed"), \
                "malformed", None
        raise exc

    async def aclose(self) -> None:
        await self.client.close()


def _connecting(exc: BaseException) -> bool:
    """Whether a time-out happened while connecting (the SDK transport's ``ConnectTimeout`` anywhere
    in its chain, by name: the SDK's HTTP library is its own choice): the endpoint is not there,
    unlike a request it took and never answered."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if type(current).__name__ == "ConnectTimeout":
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
