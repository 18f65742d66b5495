"""The per-case ReAct loop (spec §6.6): prompt, tool calls in-process, submit, next turn.

One case is one conversation. The round budget (20 model calls by default) is
shared by all turns of a multi-turn case. Tool calls run in-process against
the case's own :class:`ToolSession`; a failed call's body goes back to the
model so it can correct itself (the 422 of a bad submission included). An
accepted submission ends a turn; the last accepted one is the case's answer.
A reply without tool calls ends the case as a plain-text answer (scored, not
an error). Two consecutive empty replies, a reply cut at the token limit, an
exhausted budget or an endpoint failure end it with an error. Every record
says how its case ended (``meta["ending"]`` and ``meta["ending_kind"]``,
:func:`~metrobench.transcripts.records.mark_ending`): the model's doing, scored;
a conversation that outgrew the server's context (``context``, scored as the
reference scores any refused request: the error, response null; the server's
token counts in ``meta["context"]``); or the endpoint's (infrastructure), which
a rerun redoes.

Unlike the reference, tool-call arguments that are not valid JSON are fed
back to the model as a tool error (and recorded) instead of ending the case;
the conversation carries that call on with ``{}`` as its arguments
(:func:`replayable`), since template-rendering servers refuse invalid JSON there.
Reasoning tokens, where the endpoint reports them, are summed over the case's rounds into
``meta["reasoning_tokens"]`` (a part of ``output_tokens``; absent where no reply said).
A reply whose calls are written as ``<tool_call>`` blocks in its text is taken
as calling those tools, per the model config's ``tool_parser``
(:mod:`metrobench.agents.runner.tool_parsing`); a block that cannot be read is fed
back as a tool error. Such calls are marked ``"parsed_from_text": true`` in
``tool_calls_made``, and the reply's verbatim text is kept in
``meta["text_tool_replies"]`` (the conversation holds the prose and the calls,
each call once, as a parsing server would return them).

A client may run its cases its own way by offering ``open_case(system, case, model)``,
returning a :class:`CaseRun` whose hooks it overrides: :meth:`CaseRun.ask` (where a round's
reply comes from), :meth:`CaseRun.call` (how a tool call is answered), :meth:`CaseRun.answers`
(which tool answer is the case's answer) and :meth:`CaseRun.finish`. The scripted provider
(:mod:`metrobench.agents.rule_agent`) does, to be the reference's baseline byte for byte; every
other client is asked for replies with ``complete(messages, tools)`` in a plain :class:`CaseRun`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from metrobench.data.loader import SystemData
from metrobench.data.models import Case
from metrobench.agents.prompts import TOOLS, system_prompt, user_turns
from metrobench.agents.runner.client import ChatClient, EndpointError, RunStopped
from metrobench.agents.runner.replies import ChatReply, clean
from metrobench.agents.runner.tool_parsing import TextCall, ToolParser, apply_tool_parser
from metrobench.kiosk.tools.dispatch import ToolResponse, call_tool
from metrobench.kiosk.tools.session import ToolSession
from metrobench.transcripts.records import CaseRecord, mark_ending
from metrobench.vocabulary import SUBMIT_TOOL



def reshape(arguments: dict[str, Any]) -> dict[str, Any]:
    """An accepted submission in the scorer's response shape."""
    return {
        "outcome": arguments.get("outcome", ""),
        "kiosk_action": arguments.get("kiosk_action", {}),
        "reasoning": arguments.get("reasoning", ""),
        "ui_updates": {
            "route": arguments.get("route"),
            "fare_quote": arguments.get("fare_quote"),
            "advisory_banners": arguments.get("advisory_banners") or [],
            "assistant_message": arguments.get("assistant_message", ""),
        },
    }


def replayable(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message as the conversation carries it on: unreadable arguments become ``{}``.

    A server that renders the history through a chat template parses every past call's
    arguments (llama-server answers a history holding invalid JSON with HTTP 500, which
    would end the case); the model learns of its mistake from the tool error that
    follows, and ``tool_calls_made`` keeps the arguments exactly as it wrote them.
    """
    fixed, changed = [], False
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        if parse_arguments(function.get("arguments"))[1] is not None:
            call, changed = {**call, "function": {**function, "arguments": "{}"}}, True
        fixed.append(call)
    return {**message, "tool_calls": fixed} if changed else message


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Tool-call arguments as an object, or the error the model will be shown.

    Lone surrogates escaped in the arguments' JSON become U+FFFD (see
    :mod:`metrobench.agents.runner.replies`), so every tool and writer can encode them.
    """
    if isinstance(raw, dict):
        return raw, None
    if raw is None or raw == "":
        return {}, None
    try:
        value = clean(json.loads(raw))  # a "\\ud800" escape inside the string: U+FFFD, as in replies
    except (TypeError, json.JSONDecodeError, RecursionError) as exc:
        return None, f"arguments are not valid JSON ({exc}); send one JSON object"
    if not isinstance(value, dict):
        return None, "arguments must be a JSON object"
    return value, None


class CaseRun:
    """The state of one case while it runs."""

    def __init__(self, system: SystemData, case: Case, model: str) -> None:
        self.case = case
        context = case.raw.get("system_context", {})
        self.session = ToolSession.for_case(system, case)
        first, *self.pending_turns = user_turns(case.raw)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt(system, context)},
            {"role": "user", "content": first},
        ]
        self.record = CaseRecord(case_id=case.id, model=model, system=system.name)
        self.model_ms = 0.0
        self.cached_tokens = 0
        self.reasoning_tokens: int | None = None  # None until an endpoint reply reports them
        self.text_calls = 0  # calls parsed from text so far (their ids: call_text_1, ...)

    def finish(self, start: float) -> CaseRecord:
        """The record, its conversation, timings and ending filled in (``start``: the case's perf_counter)."""
        record = self.record
        record.messages = self.messages
        record.e2e_ms = round((time.perf_counter() - start) * 1000, 1)
        record.meta["model_ms"] = round(self.model_ms, 1)
        record.meta["cached_tokens"] = self.cached_tokens
        if self.reasoning_tokens is not None:
            record.meta["reasoning_tokens"] = self.reasoning_tokens
        mark_ending(record)
        return record

    async def ask(self, client: Any) -> ChatReply:
        """The model's next reply to the conversation so far."""
        return await client.complete(self.messages, TOOLS)

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResponse:
        """One tool call, run in the case's session."""
        return call_tool(self.session, name, arguments)

    def answers(self, name: str, answer: ToolResponse) -> bool:
        """Whether this tool answer makes the call's arguments the turn's answer: an accepted submission."""
        return name == SUBMIT_TOOL and isinstance(answer.body, dict) and bool(answer.body.get("accepted"))

    def run_tool_calls(self, tool_calls: list[dict[str, Any]],
                       text_calls: list[TextCall] | None = None) -> dict[str, Any] | None:
        """Execute one message's calls in order; the last accepted submission's arguments, if any.

        ``text_calls`` are the message's last calls, parsed from its text: their
        entries are marked, and a block that could not be read is answered with
        its error, never run.
        """
        accepted = None
        text_calls = text_calls or []
        first_text = len(tool_calls) - len(text_calls)
        for position, tool_call in enumerate(tool_calls):
            text_call = text_calls[position - first_text] if position >= first_text else None
            function = tool_call.get("function") or {}
            name = function.get("name") or ""
            if text_call is not None and text_call.error is not None:
                arguments, problem = None, text_call.error
            else:
                arguments, problem = parse_arguments(function.get("arguments"))
            if problem is not None:
                entry = {"name": name, "arguments": function.get("arguments"), "result": None,
                         "error": problem}
                content = json.dumps({"error": problem})
            else:
                answer = self.call(name, arguments)
                if answer.ok:
                    entry = {"name": name, "arguments": arguments, "result": answer.body, "error": None}
                    content = json.dumps(answer.body)
                else:
                    entry = {"name": name, "arguments": arguments, "result": None, "error": answer.text}
                    content = json.dumps({"error": answer.text})
                if self.answers(name, answer):
                    accepted = arguments
            if text_call is not None:
                entry["parsed_from_text"] = True
            self.record.tool_calls_made.append(entry)
            self.messages.append({"role": "tool", "tool_call_id": tool_call.get("id") or "",
                                  "content": content})
        return accepted


def take_reply(state: CaseRun, message: dict[str, Any], tool_parser: ToolParser,
               round_index: int) -> tuple[dict[str, Any], list[TextCall]]:
    """The reply with any text tool calls parsed; their ids are numbered across the case."""
    parsed, text_calls = apply_tool_parser(message, tool_parser, first_index=state.text_calls + 1)
    if text_calls:
        state.text_calls += len(text_calls)
        state.record.meta.setdefault("text_tool_replies", []).append(
            {"round": round_index + 1, "content": message.get("content") or ""})
    return parsed, text_calls


async def run_case(client: ChatClient | Any, system: SystemData, case: Case, *, model: str,
                   max_rounds: int, tool_parser: ToolParser = "auto") -> CaseRecord:
    """Run one case to its end; every failure is recorded on the record, never raised.

    Except :class:`RunStopped`: another request stopped the run, and this case,
    cut short without a failure of its own, is not recorded (a rerun runs it).
    """
    open_case = getattr(client, "open_case", None)  # a client that runs its cases its own way
    state: CaseRun = open_case(system, case, model) if open_case is not None else CaseRun(system, case, model)
    record = state.record
    start = time.perf_counter()
    empty_streak = 0
    accepted: dict[str, Any] | None = None
    try:
        for round_index in range(max_rounds):
            reply = await state.ask(client)
            state.model_ms += reply.elapsed_ms
            record.api_rounds += 1
            record.input_tokens += reply.prompt_tokens
            record.output_tokens += reply.completion_tokens
            state.cached_tokens += reply.cached_tokens or 0
            if reply.reasoning_tokens is not None:
                state.reasoning_tokens = (state.reasoning_tokens or 0) + reply.reasoning_tokens
            if round_index == 0:
                record.ttft_ms = round(reply.elapsed_ms, 1)
            message, text_calls = take_reply(state, reply.message, tool_parser, round_index)
            if message.get("tool_calls"):
                empty_streak = 0
                state.messages.append(replayable(message))
                accepted_now = state.run_tool_calls(message["tool_calls"], text_calls)
                if accepted_now is not None:
                    accepted = accepted_now
                    if state.pending_turns:
                        state.messages.append({"role": "user", "content": state.pending_turns.pop(0)})
                        continue
                    record.response = reshape(accepted)
                    record.raw_content = json.dumps(accepted)
                    record.reasoning_content = message.get("reasoning_content") or ""
                    break
                continue
            content = message.get("content") or ""
            reasoning = message.get("reasoning_content") or ""
            if state.pending_turns and (content or reasoning):
                empty_streak = 0
                state.messages.append(message)
                state.messages.append({"role": "user", "content": state.pending_turns.pop(0)})
                continue
            if not content and not reasoning:
                if reply.finish_reason == "length":
                    record.truncated = True
                    record.error = (f"truncated: finish_reason=length on round {round_index + 1} "
                                    f"(completion_tokens={reply.completion_tokens} ~ max_tokens cap); "
                                    "raise max_tokens")
                    break
                empty_streak += 1
                record.empty_rounds += 1
                if empty_streak >= 2:
                    record.error = (f"empty-response retry exhausted: 2 consecutive empty rounds "
                                    f"(finish_reason={reply.finish_reason})")
                    break
                continue
            state.messages.append(message)
            record.truncated = reply.finish_reason == "length"  # cut short, but still scored
            try:
                parsed = json.loads(content)
            except json.JSONDecodeError:
                parsed = None
            record.response = parsed
            record.raw_content = content
            record.reasoning_content = reasoning
            break
        else:
            record.error = f"Exhausted {max_rounds} tool call rounds"
    except RunStopped:
        raise
    except EndpointError as exc:
        record.error = str(exc)
        if exc.context is not None:  # the conversation outgrew the server's context
            record.meta["ending"] = "context"
            if exc.context:
                record.meta["context"] = exc.context
        else:
            record.meta["ending"] = "infrastructure" if exc.infrastructure else "refused"
    return state.finish(start)
