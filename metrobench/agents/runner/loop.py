"""The per-case ReAct loop (spec §6.6): prompt, tool calls in-process, submit, next turn.

One case is one conversation. The round budget (20 model calls by default) is
shared by all turns of a multi-turn case. Tool calls run in-process against
the case's own :class:`ToolSession`; a failed call's body goes back to the
model so it can correct itself (the 422 of a bad submission included). An
accepted submission ends a turn; the last accepted one is the case's answer.
A reply without tool calls ends the case as a plain-text answer (scored, not
an error). A case ends as the reference's runner ended it
(:mod:`metrobench.agents.runner.protocol`, the paper's protocol unless the model
config opts into our robustness): the second empty round of the case (a reply
with no calls, no text but whitespace and no reasoning; the count is never reset,
as the reference's was not), an empty reply cut at the token limit (``truncated``,
set only then), an exhausted budget, what the endpoint answered instead of a reply
(an HTTP status, a time-out, a malformed body) and tool-call arguments that
``json.loads`` cannot read or a call without ``id`` (the reference's uncaught
exception: its text is the error; the message's earlier calls have run) all end
it with an error, recorded and scored. Every record says how its case ended
(``meta["ending"]`` and ``meta["ending_kind"]``,
:func:`~metrobench.transcripts.records.mark_ending`): the model's doing, scored;
a conversation that outgrew the server's context (``context``, scored as the
reference scores any refused request: the error, response null; the server's
token counts in ``meta["context"]``); or the endpoint's absence (infrastructure),
which a rerun redoes.

The protocol's options change that, and each time one does, the case records it in
``meta["protocol"]`` (``{"round", "option", "calls_before", ...}``: the round, and how
many tool calls the case had made when the reference would have ended it there, which
is what :mod:`metrobench.paper.protocol_options` needs to score the case as the reference
would have): ``retry`` (failures retried
before a reply came, ``failures``), ``argument_feedback`` (unreadable arguments
fed back to the model as a tool error, ``call``; the conversation carries that call
on with ``{}`` as its arguments, :func:`replayable`, since template-rendering servers
refuse invalid JSON there) and ``tool_parser`` (``<tool_call>`` blocks in a reply's
text run as calls, ``calls``; :mod:`metrobench.agents.runner.tool_parsing`; such calls
are marked ``"parsed_from_text": true`` in ``tool_calls_made``, the reply's verbatim
text is kept in ``meta["text_tool_replies"]``, and a block that cannot be read is fed
back as a tool error). Every retry, the reference's 429 ones included, is in
``meta["retried"]``. Reasoning tokens, where the endpoint reports them, are summed over
the case's rounds into ``meta["reasoning_tokens"]`` (a part of ``output_tokens``;
absent where no reply said).

A client may run its cases its own way by offering ``open_case(system, case, model)``,
returning a :class:`CaseRun` whose hooks it overrides: :meth:`CaseRun.ask` (where a round's
reply comes from), :meth:`CaseRun.call` (how a tool call is answered), :meth:`CaseRun.answers`
(which tool answer is the case's answer) and :meth:`CaseRun.finish`. The scripted provider
(:mod:`metrobench.agents.rule_agent`) does, to be the reference's baseline byte for byte; every
other client is asked for replies with ``complete(messages, tools)`` in a plain :class:`CaseRun`.

An ``observer`` (:class:`RoundObserver`, the run's :class:`~metrobench.agents.runner.run.Progress`) is
told when each round starts and ends (with the reply's ``finish_reason``), so a case that runs long can
be shown while it runs; it only watches: nothing it does changes the case.
"""

from __future__ import annotations

import json
import time
from enum import Enum
from typing import Any, Protocol as Interface

from metrobench.data.loader import SystemData
from metrobench.data.models import Case
from metrobench.agents.prompts import TOOLS, system_prompt, user_turns
from metrobench.agents.runner.client import ChatClient, EndpointError, RunStopped
from metrobench.agents.runner.protocol import PAPER, Protocol
from metrobench.agents.runner.replies import ChatReply, clean
from metrobench.agents.runner.tool_parsing import TextCall, apply_tool_parser
from metrobench.kiosk.tools.dispatch import ToolResponse, call_tool
from metrobench.kiosk.tools.session import ToolSession
from metrobench.transcripts.records import CaseRecord, mark_ending
from metrobench.vocabulary import SUBMIT_TOOL

#: Empty rounds that end a case (the reference's ``MAX_CONSECUTIVE_EMPTY``, counted over the whole case).
EMPTY_ROUNDS = 2


class RoundObserver(Interface):
    """What watches a run's rounds as they happen (progress): told of each round's start and end."""

    def round_started(self, case_id: str, round_no: int) -> None: ...

    def round_ended(self, case_id: str, round_no: int, finish_reason: str | None) -> None: ...


class CaseEnded(Exception):
    """The case ends here with this error: what the reference's runner raised out of its loop."""

    def __init__(self, message: str, ending: str) -> None:
        super().__init__(message)
        self.ending = ending


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


def reference_arguments(raw: Any) -> tuple[Any, dict[str, Any] | None, str | None]:
    """Tool-call arguments read as the reference read them: ``(as parsed, as sent to the tool, the
    error the model is shown)``.

    ``json.loads`` on the raw value, whose failure (broken JSON, ``""``, an object where a JSON
    string belongs, no arguments) ends the case with the exception's text (:class:`CaseEnded`). A
    JSON value that is not an object is turned into the tool's payload with ``dict()``, as the
    reference built its request; that failure is an error of the call, shown to the model.
    """
    try:
        value = clean(json.loads(raw))
    except (TypeError, ValueError, RecursionError) as exc:
        raise CaseEnded(str(exc) if raw is not None else "'arguments'", "arguments") from None
    if isinstance(value, dict):
        return value, value, None
    try:
        return value, dict(value), None
    except (TypeError, ValueError) as exc:
        return value, None, str(exc)


def _ends_the_reference(raw: Any, tool_call: dict[str, Any]) -> bool:
    """Whether the reference's runner would have ended the case on this call (its arguments, or no id)."""
    try:
        reference_arguments(raw)
    except CaseEnded:
        return True
    return "id" not in tool_call


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Tool-call arguments as an object, or the error the model will be shown (``argument_feedback``).

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

    def run_tool_calls(self, tool_calls: list[dict[str, Any]], text_calls: list[TextCall] | None = None,
                       protocol: Protocol = PAPER, round_index: int = 0) -> dict[str, Any] | None:
        """Execute one message's calls in order; the last accepted submission's arguments, if any.

        ``text_calls`` are the message's last calls, parsed from its text: their
        entries are marked, and a block that could not be read is answered with
        its error, never run. Arguments are read as ``protocol`` says: the reference's
        way (unreadable ones raise :class:`CaseEnded`, after the earlier calls ran), or
        fed back to the model (``argument_feedback``).
        """
        accepted = None
        text_calls = text_calls or []
        first_text = len(tool_calls) - len(text_calls)
        for position, tool_call in enumerate(tool_calls):
            text_call = text_calls[position - first_text] if position >= first_text else None
            function = tool_call.get("function") or {}
            name = function.get("name") or ""
            raw = function.get("arguments")
            if text_call is not None and text_call.error is not None:
                shown, arguments, problem = raw, None, text_call.error
            elif protocol.argument_feedback:
                arguments, problem = parse_arguments(raw)
                shown = raw if problem is not None else arguments
                if _ends_the_reference(raw, tool_call):
                    self.record.meta.setdefault("protocol", []).append(
                        {"round": round_index + 1, "option": "argument_feedback", "call": name,
                         "calls_before": len(self.record.tool_calls_made)})
            else:
                shown, arguments, problem = reference_arguments(raw)
            if problem is not None or arguments is None:
                entry = {"name": name, "arguments": shown, "result": None, "error": problem}
                content = json.dumps({"error": problem})
            else:
                answer = self.call(name, arguments)
                if answer.ok:
                    entry = {"name": name, "arguments": shown, "result": answer.body, "error": None}
                    content = json.dumps(answer.body)
                else:
                    entry = {"name": name, "arguments": shown, "result": None, "error": answer.text}
                    content = json.dumps({"error": answer.text})
                if self.answers(name, answer):
                    accepted = arguments
            if text_call is not None:
                entry["parsed_from_text"] = True
            self.record.tool_calls_made.append(entry)
            if "id" not in tool_call and not protocol.argument_feedback:
                raise CaseEnded("'id'", "arguments")  # the reference's KeyError, once the call had run
            self.messages.append({"role": "tool", "tool_call_id": tool_call.get("id") or "",
                                  "content": content})
        return accepted


def take_reply(state: CaseRun, message: dict[str, Any], protocol: Protocol,
               round_index: int) -> tuple[dict[str, Any], list[TextCall]]:
    """The reply with any text tool calls parsed; their ids are numbered across the case."""
    parsed, text_calls = apply_tool_parser(message, protocol.tool_parser, first_index=state.text_calls + 1)
    if text_calls:
        state.text_calls += len(text_calls)
        state.record.meta.setdefault("text_tool_replies", []).append(
            {"round": round_index + 1, "content": message.get("content") or ""})
        state.record.meta.setdefault("protocol", []).append(
            {"round": round_index + 1, "option": "tool_parser", "calls": len(text_calls),
             "calls_before": len(state.record.tool_calls_made)})
    return parsed, text_calls


#: Retried failures that the reference retries too (429) or that are the endpoint's absence.
_REFERENCE_RETRIES = frozenset({"429", "connection"})


def note_retries(record: CaseRecord, round_index: int, retried: list[str]) -> None:
    """Record a round's retried failures (``meta["retried"]``), and those only the ``retry`` option
    retries as its intervention (``meta["protocol"]``)."""
    if not retried:
        return
    record.meta.setdefault("retried", []).append({"round": round_index + 1, "failures": list(retried)})
    optional = [label for label in retried if label not in _REFERENCE_RETRIES]
    if optional:
        record.meta.setdefault("protocol", []).append(
            {"round": round_index + 1, "option": "retry", "failures": optional,
             "calls_before": len(record.tool_calls_made)})


class Step(Enum):
    """What a round leaves its case to do: ask the model again, or stop (the answer or the error is
    on the record)."""

    ASK_AGAIN = "ask again"
    ENDED = "ended"


async def run_case(client: ChatClient | Any, system: SystemData, case: Case, *, model: str,
                   max_rounds: int, protocol: Protocol = PAPER,
                   observer: RoundObserver | None = None) -> CaseRecord:
    """Run one case to its end; every failure is recorded on the record, never raised.

    Except :class:`RunStopped`: another request stopped the run, and this case,
    cut short without a failure of its own, is not recorded (a rerun runs it).
    ``observer`` is told of each round's start and end (rounds counted from 1).

    A round ends the case with a submission the kiosk accepted (:func:`_tool_round`), an answer in
    text (:func:`_text_answer`), a truncated or one-too-many empty reply (:func:`_empty_round`);
    otherwise the case ends when its rounds run out, a call ends it (:class:`CaseEnded`) or the
    endpoint fails (:func:`_endpoint_failed`).
    """
    open_case = getattr(client, "open_case", None)  # a client that runs its cases its own way
    state: CaseRun = open_case(system, case, model) if open_case is not None else CaseRun(system, case, model)
    record = state.record
    start = time.perf_counter()
    empties = 0  # over the whole case: the reference never resets its count after a tool call
    round_index = 0
    try:
        for round_index in range(max_rounds):
            reply = await _ask(state, client, case.id, round_index, observer)
            message, text_calls = take_reply(state, reply.message, protocol, round_index)
            if message.get("tool_calls"):
                step = _tool_round(state, message, text_calls, protocol, round_index)
            elif not _says_something(message):
                empties += 1
                step = _empty_round(record, reply, round_index, empties)
            elif state.pending_turns:
                state.messages.append(message)
                step = _next_turn(state)
            else:
                step = _text_answer(state, message)
            if step is Step.ENDED:
                break
        else:
            record.error = f"Exhausted {max_rounds} tool call rounds"
    except RunStopped:
        raise
    except CaseEnded as exc:
        record.error = str(exc)
        record.meta["ending"] = exc.ending
    except EndpointError as exc:
        _endpoint_failed(record, round_index, exc)
    return state.finish(start)


async def _ask(state: CaseRun, client: ChatClient | Any, case_id: str, round_index: int,
               observer: RoundObserver | None) -> ChatReply:
    """One round's reply, its retries, time and tokens counted on the case."""
    record = state.record
    if observer is not None:
        observer.round_started(case_id, round_index + 1)
    reply = await state.ask(client)
    if observer is not None:
        observer.round_ended(case_id, round_index + 1, reply.finish_reason)
    note_retries(record, round_index, reply.retried)
    state.model_ms += reply.elapsed_ms
    record.api_rounds += 1
    record.input_tokens += reply.prompt_tokens
    record.output_tokens += reply.completion_tokens
    state.cached_tokens += reply.cached_tokens or 0
    if reply.reasoning_tokens is not None:
        state.reasoning_tokens = (state.reasoning_tokens or 0) + reply.reasoning_tokens
    if round_index == 0:
        record.ttft_ms = round(reply.elapsed_ms, 1)
    return reply


def _tool_round(state: CaseRun, message: dict[str, Any], text_calls: list[TextCall], protocol: Protocol,
                round_index: int) -> Step:
    """Run the reply's calls; an accepted submission answers the turn: the next user turn, else the
    case's answer."""
    # carried on as sent, unless a call we fed back must go on with {} in its place (a
    # template-rendering server refuses invalid JSON in the history)
    state.messages.append(replayable(message) if protocol.argument_feedback or text_calls else message)
    accepted = state.run_tool_calls(message["tool_calls"], text_calls, protocol, round_index)
    if accepted is None:
        return Step.ASK_AGAIN
    if state.pending_turns:
        return _next_turn(state)
    record = state.record
    record.response = reshape(accepted)
    record.raw_content = json.dumps(accepted)
    record.reasoning_content = message.get("reasoning_content") or ""
    return Step.ENDED


def _says_something(message: dict[str, Any]) -> bool:
    """Content other than whitespace (whitespace is empty, as the reference reads it), or reasoning."""
    return bool((message.get("content") or "").strip() or message.get("reasoning_content"))


def _next_turn(state: CaseRun) -> Step:
    """The case's next user turn, asked next."""
    state.messages.append({"role": "user", "content": state.pending_turns.pop(0)})
    return Step.ASK_AGAIN


def _empty_round(record: CaseRecord, reply: ChatReply, round_index: int, empties: int) -> Step:
    """An empty reply (the case's ``empties``-th): truncated at the token cap, or one too many, ends it."""
    record.empty_rounds += 1
    if reply.finish_reason == "length":
        record.truncated = True  # only here, as the reference sets it
        record.error = (f"truncated: finish_reason=length on round {round_index + 1} "
                        f"(completion_tokens={reply.completion_tokens} ~ max_tokens cap); "
                        "raise max_tokens")
        return Step.ENDED
    if empties >= EMPTY_ROUNDS:
        record.error = (f"empty-response retry exhausted: {empties} empty rounds "
                        f"(finish_reason={reply.finish_reason})")
        return Step.ENDED
    return Step.ASK_AGAIN


def _text_answer(state: CaseRun, message: dict[str, Any]) -> Step:
    """A reply in text is the case's answer: its JSON, or None where it is not JSON."""
    state.messages.append(message)
    content = message.get("content") or ""
    try:
        parsed = json.loads(content)
    except json.JSONDecodeError:
        parsed = None
    record = state.record
    record.response = parsed
    record.raw_content = content
    record.reasoning_content = message.get("reasoning_content") or ""
    return Step.ENDED


def _endpoint_failed(record: CaseRecord, round_index: int, exc: EndpointError) -> None:
    """The endpoint's failure as the case's error and ending."""
    note_retries(record, round_index, exc.retried)
    record.error = str(exc)
    if exc.context is not None:  # the conversation outgrew the server's context
        record.meta["ending"] = "context"
        if exc.context:
            record.meta["context"] = exc.context
    else:
        record.meta["ending"] = exc.ending or ("infrastructure" if exc.infrastructure else "refused")
