"""The scripted baseline: no model, a fixed decision tree over the tools (spec §8).

It reproduces the reference baseline's behaviour on purpose, quirks included,
because the paper's baseline row (84.6 Tier 1) is its score:

* only ``disruption_feed`` sees the case (its disruptions); every other call
  goes to a plain session of the system, as the reference's calls without a
  ``case_id`` did, and the feed is asked without the current time, so expired
  disruptions still count;
* station *names* are submitted as route stops, so every submission with a
  route is rejected (422) and is scored anyway;
* the service-hours gate reads a field no case has, so it never fires;
* in accessibility mode every stop is flagged (the reference read the
  accessibility record from the wrong level and looked for a key that does not
  exist);
* station closures and weather never match the route, and ``fare_quote`` is
  dropped whenever the answer is downgraded to ``advisory_only``.

It is a provider, ``scripted`` (a model entry ``rule-agent: {provider: scripted}``; a
config that gives none gets that entry, :data:`BUILTIN_ENTRY`): :class:`ScriptedClient`
answers each round of the runner's loop (:mod:`metrobench.agents.runner.loop`) as an
endpoint would, an assistant message with one tool call, so ``metrobench bench`` runs,
records, resumes and views it as any model, and its records hold their conversation
(``messages``) like any other's. Tools run in-process (:func:`metrobench.kiosk.tools.dispatch.call_tool`):
no server, no ports, and one process scores the whole benchmark in seconds. What the
reference did otherwise lives in :class:`ScriptedCase`, the loop's hooks overridden: one
user message of all the events, its two tool sessions, errors kept to 200 characters, and
its submission the case's answer, accepted or not. The tree itself is walked again each
round over the answers so far (:meth:`ScriptedCase.next_call`): it is a pure function of
the case and the answers.

Two modes (``mode`` of its entry, :class:`~metrobench.agents.runner.config.ModelConfig`).
``baseline`` (the default) is the reference's agent above, byte for byte. ``teacher`` makes
traces to distil: the same decisions, but the route's stops are the ``station_id`` values
of ``route_planner``'s answer, so the kiosk accepts the submission and the trace ends on an
accepted ``submit_assistant_state``, as the reference's training traces do (spec §11.2).
An entry without a ``mode`` runs its teacher mode where it teaches (``bench --teacher``,
the workflow's train view: :meth:`ModelConfig.as_teacher`), into a work transcript of its
own; the mode is in its settings, so the two modes' fingerprints differ and never pass for
each other. ``metrobench rule-agent --mode`` (:mod:`metrobench.commands.baseline`) is an
alias for users.

Ids, not the whole stop objects the system prompt asks to copy: the kiosk checks
only the ids (spec §5.9, ``stop.get("station_id", stop)``) and no Tier-1 component
reads the stops, while the objects double the submission a student must learn
to write (SmolLM2 tokens of the 322 mini-study traces' submissions: median 337
with ids, 652 with objects; 4 of 322 above the CPU studies' 512 new tokens a
round with ids, 240 with objects).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, get_args

from metrobench.agents.prompts import user_message
from metrobench.agents.runner.client import EndpointError
from metrobench.agents.runner.config import SCRIPTED_MAX_ROUNDS, ModelConfig, ScriptMode
from metrobench.agents.runner.loop import CaseRun
from metrobench.agents.runner.replies import ChatReply
from metrobench.data.loader import SystemData
from metrobench.data.models import Case
from metrobench.errors import MetrobenchError
from metrobench.kiosk.tools.dispatch import ToolResponse, call_tool
from metrobench.kiosk.tools.session import ToolSession
from metrobench.transcripts.records import CaseRecord
from metrobench.vocabulary import RIDER_KEYS, SUBMIT_TOOL

MODEL_NAME = "rule-agent"
#: Its study config entry where a config gives none (:meth:`metrobench.study.StudyConfig.model_entry`).
BUILTIN_ENTRY: dict[str, Any] = {"provider": "scripted"}
ERROR_CHARS = 200  # the reference kept this much of a failed call's body
Mode = ScriptMode  # the provider's modes (ModelConfig.mode)
MODES: tuple[Mode, ...] = get_args(ScriptMode)


def parse_events(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The last origin, destination, passenger counts, free text and payment method."""
    parsed: dict[str, Any] = {"origin": None, "destination": None, **dict.fromkeys(RIDER_KEYS, 0),
                              "has_pax": False, "freetext": None, "payment_method": None}
    for event in events:
        kind = event.get("type", "")
        if kind == "station_selected" and event.get("field") in ("origin", "destination"):
            parsed[event["field"]] = event.get("value")
        elif kind == "passenger_count_changed":
            for key in RIDER_KEYS:
                parsed[key] = event.get(key, 0)
            parsed["has_pax"] = True
        elif kind == "freetext_input":
            parsed["freetext"] = event.get("text", "")
        elif kind == "payment_method_selected":
            parsed["payment_method"] = event.get("method")
    return parsed


def fare_quote(fare: dict[str, Any], pax: dict[str, int]) -> dict[str, Any]:
    """The submitted fare quote: one line item per fare item, its label parsed as ``<type> xN``."""
    items = []
    for item in fare.get("line_items", []):
        parts = item.get("label", "").lower().split(" x")
        count = int(parts[1]) if len(parts) > 1 else 1
        amount = item["amount"]
        items.append({
            "rider_type": parts[0].strip() if parts else "adult",
            "count": count,
            "unit_fare": round(amount / count if count > 0 else amount, 2),
            "subtotal": amount,
            "currency": item.get("currency", fare.get("currency", "USD")),
        })
    riders = sum(pax[key] for key in RIDER_KEYS)
    summary = {**pax, "free_riders": max(0, riders - sum(i["count"] for i in items))}
    return {"passenger_summary": summary, "line_items": items,
            "discounts": fare.get("discounts", []), "total": fare["total"],
            "currency": fare.get("currency", "USD")}


def route_of(planned: dict[str, Any], mode: Mode = "baseline") -> dict[str, Any]:
    """The submitted route: baseline, station names where ids belong (the reference's quirk);
    teacher, the station ids of ``route_planner``'s stops (what the kiosk checks)."""
    stops = planned["stops"]
    submitted = [s["station_id"] if mode == "teacher" else s["station_name"] for s in stops]
    return {"origin": stops[0]["station_name"], "destination": stops[-1]["station_name"],
            "stops": submitted, "transfers": planned["transfers"],
            "estimated_minutes": planned["estimated_minutes"],
            "distance_miles": planned["distance_miles"],
            "line_sequence": planned.get("line_sequence", [])}


#: How the decision tree asks for a tool: ``call(name, arguments) -> (result, error)``.
Call = Callable[[str, dict[str, Any]], tuple[Any, "str | None"]]


def _decline(outcome: str, reason: str, message: str) -> dict[str, Any]:
    return {"outcome": outcome, "kiosk_action": {"action": "block_purchase", "reason_code": reason},
            "assistant_message": message}


def _events(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The case's events, a multi-turn case's turns flattened in order."""
    turns = case.get("multi_turn_events")
    return [e for turn in turns for e in turn] if turns else case["events"]


def _without_stations(parsed: dict[str, Any], call: Call) -> dict[str, Any]:
    """No origin or destination: a knowledge-base answer to the free text, else a decline."""
    if not parsed["freetext"]:
        return _decline("request_declined", "invalid_request",
                        "Please choose an origin and a destination station.")
    found, _ = call("knowledge_base", {"query": parsed["freetext"], "category": "general"})
    if found and found.get("found"):
        content = found["results"][0]["content"] if found["results"] else ""
        return {"outcome": "policy_answer_only",
                "kiosk_action": {"action": "display_info", "reason_code": "ok"},
                "assistant_message": content[:300]}
    return _decline("request_declined", "unsupported_request",
                    "This kiosk cannot help with that request.")


def _disruption_banners(planned: dict[str, Any], call: Call) -> list[dict[str, str]]:
    """A banner per fed disruption on the route's stops or lines (closures and weather never match)."""
    banners: list[dict[str, str]] = []
    feed, _ = call("disruption_feed", {"severity_filter": "all"})
    if feed:
        stop_ids = {s["station_id"] for s in planned["stops"]}
        lines = set(planned.get("line_sequence", []))
        for d in feed.get("disruptions", []):
            line = d.get("line")
            if set(d.get("segment") or []) & stop_ids or (line and line in lines):
                banners.append({"severity": "critical" if d["severity"] == "critical" else "warning",
                                "title": d["type"].replace("_", " ").title(),
                                "body": d["message"]})
    return banners


def _accessibility_banners(planned: dict[str, Any], call: Call) -> list[dict[str, str]]:
    """A warning per stop whose accessibility record lacks step-free access or elevators (all of them)."""
    banners: list[dict[str, str]] = []
    for stop in planned["stops"]:
        info, _ = call("station_info", {"station_id": stop["station_id"],
                                        "query_type": "accessibility"})
        if info:
            record = info.get("accessibility", {})  # the reference's lookup: always empty
            issues = []
            if not record.get("step_free"):
                issues.append("not step-free")
            if not record.get("elevators"):
                issues.append("no elevators")
            if issues:
                name = stop["station_name"]
                banners.append({"severity": "warning", "title": f"Accessibility: {name}",
                                "body": f"{name}: {', '.join(issues)}"})
    return banners


def decide(case: dict[str, Any], call: Call, mode: Mode = "baseline") -> dict[str, Any]:
    """Walk the decision tree for one case; returns the submitted arguments."""
    context = case.get("system_context", {})
    parsed = parse_events(_events(case))

    if not parsed["origin"] or not parsed["destination"]:
        return _without_stations(parsed, call)

    temporal = context.get("temporal_context") or {}
    available = temporal.get("service_available")  # no case has this field: the gate never fires
    if available is not None and not available:
        return {"outcome": "service_unavailable",
                "kiosk_action": {"action": "block_purchase", "reason_code": "no_service"},
                "assistant_message": "There is no service at the requested time."}

    planned, error = call("route_planner", {"origin": parsed["origin"],
                                            "destination": parsed["destination"]})
    if error:
        return _decline("request_declined", "invalid_request", f"Could not plan route: {error[:100]}")
    pax = {key: parsed[key] for key in RIDER_KEYS}
    if not parsed["has_pax"]:
        pax["adults"] = 1
    fare_args: dict[str, Any] = {"route_id": planned["route_id"], "passengers": pax,
                                 "ticket_type": "single"}
    if parsed["payment_method"]:
        fare_args["payment_method"] = parsed["payment_method"]
    fare, error = call("fare_calculator", fare_args)
    if error:
        return _decline("request_declined", "invalid_request", f"Could not calculate fare: {error[:100]}")

    route, quote = route_of(planned, mode), fare_quote(fare, pax)
    outcome, action, reason = "route_and_fare_ready", "prompt_purchase", "ok"
    disrupted = _disruption_banners(planned, call) if context.get("active_disruptions") else []
    if disrupted:
        outcome, action = "advisory_only", "display_info"
    inaccessible = _accessibility_banners(planned, call) if context.get("accessibility_mode") else []
    if inaccessible:
        outcome, action, reason = "advisory_only", "display_info", "accessibility_issue"
    banners = disrupted + inaccessible

    parts = [f"Route: {route['origin']} to {route['destination']}",
             f"{route['transfers']} transfer(s), ~{route['estimated_minutes']} min",
             f"Fare: {quote['total']} {quote['currency']}"]
    parts += [f"{b['severity'].upper()}: {b['body']}" for b in banners]
    submit: dict[str, Any] = {"outcome": outcome, "route": route,
                              "kiosk_action": {"action": action, "reason_code": reason},
                              "assistant_message": ". ".join(parts)}
    if outcome == "route_and_fare_ready":
        submit["fare_quote"] = quote
    if banners:
        submit["advisory_banners"] = banners
    return submit


class _Asked(Exception):
    """The decision tree asked for a call not answered yet: the next reply's."""

    def __init__(self, name: str, arguments: dict[str, Any]) -> None:
        super().__init__(name)
        self.name, self.arguments = name, arguments


class ScriptedCase(CaseRun):
    """One case of the scripted agent in the runner's loop, run as the reference ran its baseline.

    The conversation is the prompt and one user message of all the case's events (a multi-turn
    case's turns flattened, as the reference agent read them: it decides once), then one tool call a
    round. Tools run in two sessions: ``disruption_feed`` in the case's (its disruptions, no current
    time), every other call in a plain session of the system; a failed call's body is kept to
    :data:`ERROR_CHARS`. Its submission, accepted or not, is the case's answer.
    """

    def __init__(self, system: SystemData, case: Case, model: str, mode: Mode) -> None:
        super().__init__(system, case, model)
        self.mode = mode
        self.messages[1] = {"role": "user", "content": user_message(_events(case.raw))}
        self.pending_turns = []
        self.plain = ToolSession(system)
        self.feed = ToolSession(system, case_id=case.id)  # no current_time: nothing expires
        self.feed.set_disruptions(case.raw.get("system_context", {}).get("active_disruptions") or [])

    def next_call(self) -> tuple[str, dict[str, Any]]:
        """The tree's next call: the tree walked again, its calls so far answered as recorded."""
        made = iter(self.record.tool_calls_made)

        def replay(name: str, arguments: dict[str, Any]) -> tuple[Any, str | None]:
            entry = next(made, None)
            if entry is None:
                raise _Asked(name, arguments)
            return entry["result"], entry["error"]

        try:
            submit = decide(self.case.raw, replay, self.mode)
        except _Asked as asked:
            return asked.name, asked.arguments
        return SUBMIT_TOOL, submit

    async def ask(self, client: Any) -> ChatReply:
        return client.reply(self)

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResponse:
        answer = call_tool(self.feed if name == "disruption_feed" else self.plain, name, arguments)
        return answer if answer.ok else ToolResponse(answer.status, answer.body, answer.text[:ERROR_CHARS])

    def answers(self, name: str, answer: ToolResponse) -> bool:
        return name == SUBMIT_TOOL  # scored whether the kiosk accepted it or not (spec section 8)

    def finish(self, start: float) -> CaseRecord:
        record = super().finish(start)
        # No request went to any model: no rounds (paper.protocol's mean_rounds, 0 for the rule agent)
        # and no model time (as the reference's baseline records; and a rerun writes the same bytes).
        record.api_rounds = 0
        record.e2e_ms = 0.0
        return record


class ScriptedClient:
    """The ``scripted`` provider: answers each round as an endpoint would, with the decision tree's call.

    A reply is an assistant message with one tool call (``call_<i>``, the case's i-th call, its
    arguments a JSON string) and no tokens; a tree that fails ends the case with its error as a
    refused request (the reference recorded any failure as the case's error).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        self.mode: Mode = cfg.script_mode
        self.stopped: str | None = None
        self.where = "scripted"

    def open_case(self, system: SystemData, case: Case, model: str) -> ScriptedCase:
        return ScriptedCase(system, case, model, self.mode)

    def reply(self, state: ScriptedCase) -> ChatReply:
        try:
            name, arguments = state.next_call()
        except Exception as exc:  # noqa: BLE001 - the reference recorded any failure as the case's error
            raise EndpointError(str(exc), infrastructure=False) from None
        call = {"id": f"call_{len(state.record.tool_calls_made)}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
        return ChatReply(message={"role": "assistant", "content": "", "tool_calls": [call]},
                         finish_reason="tool_calls")

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ChatReply:
        raise MetrobenchError("the scripted provider answers a case it opened (open_case), not a bare conversation")

    async def aclose(self) -> None:
        return None


def scripted_config(model: str = MODEL_NAME, mode: Mode | None = None) -> ModelConfig:
    """The rule agent's model config (what ``models: {rule-agent: {provider: scripted}}`` gives)."""
    return ModelConfig(name=model, provider="scripted", mode=mode, max_rounds=SCRIPTED_MAX_ROUNDS)


def run_case(system: SystemData, case: Case | dict[str, Any], *, model: str = MODEL_NAME,
             mode: Mode = "baseline") -> CaseRecord:
    """One case (or its raw JSON) through the runner's loop, as ``bench`` runs it, without the run's
    stamps in ``meta`` (its config, settings, case hash, selection and serving)."""
    from metrobench.agents.runner.loop import run_case as run_in_loop

    if mode not in MODES:
        raise ValueError(f"rule agent mode {mode!r}: expected one of {', '.join(MODES)}")
    if isinstance(case, dict):
        raw, case = case, Case.model_validate(case)
        case._raw = raw
    cfg = scripted_config(model, mode)
    return asyncio.run(run_in_loop(ScriptedClient(cfg), system, case, model=model, max_rounds=cfg.max_rounds))


def run_cases(system: SystemData, cases: Iterable[Case], *, model: str = MODEL_NAME,
              mode: Mode = "baseline") -> Iterator[CaseRecord]:
    for case in cases:
        yield run_case(system, case, model=model, mode=mode)
