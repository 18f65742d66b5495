"""One chat request to a model endpoint, in that endpoint's dialect, with retries.

Every dialect answers in the same chat shape (an assistant message with
``content``, ``tool_calls`` and, where the server reasons aloud,
``reasoning_content``), which is what the loop appends, records and scores:

* ``llama_cpp`` — a local llama.cpp server (``max_tokens``; thinking on/off via
  ``chat_template_kwargs``; top_k/min_p in the body);
* ``openai`` — the OpenAI API (``max_completion_tokens``, ``reasoning_effort``);
* ``azure`` — Azure OpenAI chat completions (``api-key`` header, ``api-version``);
* ``azure_responses`` — Azure's Responses API, converted to and from the chat shape;
* ``mistral`` — Mistral's chat API (``max_tokens``).

Requests are retried on 429, 5xx, time-outs and connection errors with
exponential backoff (``retry-after`` honoured); what still fails raises
:class:`EndpointError` with the reference's ``"<status>: <body[:500]>"`` text.
A malformed HTTP 200 reply (a body that is not JSON, such as a proxy's HTML
page, or JSON without a usable ``choices[0].message`` / Responses ``output``)
is treated the same way: retried, then a retryable :class:`EndpointError`
(``"malformed reply: ..."``) that the loop records on the case.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from metrobench.errors import MetrobenchError
from metrobench.retry import backoff_delay, retry_after
from metrobench.agents.runner.config import ModelConfig


class EndpointError(Exception):
    """A request that failed for good. ``retryable``: worth redoing in a later run."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class MalformedReply(Exception):
    """An HTTP 200 whose body is not the shape the dialect promises (transient: retried)."""


def _snippet(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return " ".join(text.split())[:200]


@dataclass
class ChatReply:
    message: dict[str, Any]
    finish_reason: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    elapsed_ms: float = 0.0


def _api_key(cfg: ModelConfig) -> str:
    if cfg.api_key_env:
        key = os.environ.get(cfg.api_key_env)
        if not key:
            raise MetrobenchError(f"model {cfg.name}: set the environment variable {cfg.api_key_env}")
        return key
    if cfg.provider == "llama_cpp":
        return "local"
    raise MetrobenchError(f"model {cfg.name}: provider {cfg.provider} needs api_key_env")


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


def chat_from_responses(response: dict[str, Any]) -> ChatReply:
    """A Responses API result as a chat-completions assistant message."""
    text, reasoning, calls = [], [], []
    output = response.get("output") or []
    for item in output:
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    text.append(part.get("text", ""))
        elif kind == "function_call":
            calls.append({"id": item.get("call_id"), "type": "function",
                          "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}})
        elif kind == "reasoning":
            for part in item.get("summary") or []:
                reasoning.append(part.get("text", ""))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    message["responses_output"] = output
    incomplete = (response.get("incomplete_details") or {}).get("reason")
    if response.get("status") == "incomplete" and incomplete == "max_output_tokens":
        finish = "length"
    else:
        finish = "tool_calls" if calls else "stop"
    usage = response.get("usage") or {}
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
    return ChatReply(message, finish, usage.get("input_tokens", 0) or 0, usage.get("output_tokens", 0) or 0,
                     cached)


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
        key = _api_key(cfg)
        common = {"max_retries": 0, "timeout": cfg.timeout_s}
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
        if cfg.seed is not None:
            kwargs["seed"] = cfg.seed
        if cfg.provider in ("openai", "azure"):
            kwargs["max_completion_tokens"] = cfg.max_tokens
        else:
            kwargs["max_tokens"] = cfg.max_tokens
        if cfg.reasoning_effort:
            kwargs["reasoning_effort"] = cfg.reasoning_effort
        extra: dict[str, Any] = {}
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
        if self.cfg.provider == "azure_responses":
            response = await self.client.responses.create(**self.responses_kwargs(messages, tools))
            return _read_reply(response, _responses_reply)
        reply = await self.client.chat.completions.create(**self.chat_kwargs(messages, tools))
        return _read_reply(reply, _chat_reply)

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ChatReply:
        """One model turn, retried on transient failures."""
        openai = self._openai
        attempts = max(1, self.cfg.retries)
        for attempt in range(1, attempts + 1):
            start = time.perf_counter()
            try:
                reply = await self._once(messages, tools)
                reply.elapsed_ms = (time.perf_counter() - start) * 1000
                return reply
            except openai.APIStatusError as exc:
                status = exc.status_code
                body = exc.response.text if exc.response is not None else str(exc)
                transient = status == 429 or status >= 500
                if not transient or attempt == attempts:
                    raise EndpointError(f"{status}: {body[:500]}", retryable=transient) from None
                delay = retry_after(exc)
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                if attempt == attempts:
                    raise EndpointError(f"{type(exc).__name__}: {exc}", retryable=True) from None
                delay = None
            except MalformedReply as exc:
                if attempt == attempts:
                    raise EndpointError(f"malformed reply: {exc}", retryable=True) from None
                delay = None
            await asyncio.sleep(backoff_delay(attempt, self.cfg.backoff_s, delay))
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self.client.close()


def _read_reply(reply: Any, read: Any) -> ChatReply:
    """``read(reply)``, with any failure to find the promised shape as :class:`MalformedReply`.

    The SDK returns the body text when a 200 is not JSON, and builds its models
    without validation, so a JSON reply of the wrong shape shows up only as an
    attribute, type or index error here.
    """
    if not hasattr(reply, "model_dump"):
        raise MalformedReply(f"HTTP 200 body is not a JSON object: {_snippet(reply)}")
    try:
        return read(reply)
    except MalformedReply:
        raise
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        raise MalformedReply(f"{type(exc).__name__}: {exc}") from None


def _chat_reply(reply: Any) -> ChatReply:
    choices = reply.choices
    if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
        raise MalformedReply(f"HTTP 200 body has no choices[0].message: "
                             f"{_snippet(reply.model_dump(mode='json'))}")
    choice = choices[0]
    message = choice.message.model_dump(mode="json", exclude_none=True)
    message["content"] = message.get("content") or ""
    usage = reply.usage
    cached = None
    if usage is not None and usage.prompt_tokens_details is not None:
        cached = usage.prompt_tokens_details.cached_tokens
    return ChatReply(message, choice.finish_reason, usage.prompt_tokens if usage else 0,
                     usage.completion_tokens if usage else 0, cached)


def _responses_reply(response: Any) -> ChatReply:
    dumped = response.model_dump(mode="json")
    if not isinstance(dumped.get("output"), list):
        raise MalformedReply(f"HTTP 200 body has no output list: {_snippet(dumped)}")
    return chat_from_responses(dumped)

