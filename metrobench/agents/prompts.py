"""What the model is told: the system prompt, the user messages, and the tool schemas.

The structure and the facts follow the reference harness (spec §6.2-§6.4),
because scored conventions live in them and the PEFT students were trained on
that shape: the same sections in the same order, the same conditional blocks,
the fare rules as the same ASCII-escaped JSON, the user message line formats.
The prose is our own.

:func:`prompt_digest` is what a run's fingerprint carries of all this: the
SHA-256 of the templates rendered with placeholders for a system's facts and a
case's values (every conditional section on, every event kind, the tool
schemas). Any edit of what the model is told changes it, so a resumed run never
mixes prompts; a change of code that renders the same text does not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from metrobench import vocabulary as V
from metrobench.data.loader import SystemData


def fare_rules(system: SystemData) -> dict[str, Any]:
    """The fare facts shown to the model, keys in the reference's order."""
    fb, fares = system.framebook_raw, system.fares_raw
    symbol, terms = fb["currency_symbol"], fb["terminology"]
    rules: dict[str, Any] = {
        "model": fares.get("model", "flat"),
        "base_fare": f"{symbol}{fares['base_fare']}",
        "currency": fb["currency_code"],
        "format": fb["fare_display_format"],
        "payment": [terms["smartcard"], terms["contactless"]],
    }
    for key in ("discounts", "fare_brackets", "surcharges", "station_overrides", "payment_methods"):
        if fares.get(key):
            rules[key] = fares[key]
    if "gold_fare" in fares:
        rules["gold_class"] = {"fare": f"{symbol}{fares['gold_fare']}",
                               "card": terms.get("smartcard_premium", "Gold Card")}
    return rules


_ROLE = """
## Your Role
You help riders plan journeys, work out fares and find out about stations.
Look routes, fares and station details up with the tools.
Never invent route or fare information: if a tool has not told you, you do not know it.
"""

_WORKFLOW = """
## Workflow
1. Collect what you need with route_planner, fare_calculator, station_info and the other tools
2. Once you have everything, call submit_assistant_state with the final kiosk state
3. Every conversation must end with a submit_assistant_state call, never with plain text
4. Choose the outcome: route_and_fare_ready (an ordinary trip), advisory_only (route shown with a disruption notice), service_unavailable (no service), request_declined (the request cannot be served), or policy_answer_only (information only)
5. Choose the kiosk_action: prompt_purchase (ticket can be bought), display_info (show information only), block_purchase (purchase not possible) or refer_to_staff (a person must help)
"""

_REASONS = """
## Reason Code Semantics
- `ok`: the request can be completed normally
- `no_service`: there is no service for this trip or at this time
- `invalid_request`: the request contradicts itself or cannot be done as asked
- `unsupported_request`: the kiosk cannot help with this kind of request
- `accessibility_issue`: the route does not meet the rider's stated accessibility need
- `policy_exception`: a special policy changes the usual fare or purchase and should be pointed out
"""

_BANNERS = """
## Advisory Banners
advisory_banners are the main way the kiosk shows the rider what matters next to the route and fare. Severities:
- `critical`: no service, purchase blocked, or a safety matter
- `warning`: a disruption on the route, an accessibility concern, the last train is close
- `info`: ID or security rules, payment requirements, opening-hours reminders, policy context, notes about a station, late-night service
- `positive`: a discount, exception or pass that works in the rider's favour

Make each banner about this trip: name the affected stations, the times or the exact policy points from these instructions rather than generic text. Use several banners when there are several separate concerns.
"""

_RULES = """
## Rules
- Call the card {card} (not "metro card" or any other name)
- Give fare totals as numbers (2.50), not as text ("{symbol}2.50")
- Write line names in line_sequence in lower case ("red", not "Red")
- Copy the stop objects from route_planner into route.stops unchanged (station_id, station_name, line, is_transfer)
- If submit_assistant_state answers with an error, correct the state and submit it again
- With route_and_fare_ready, include a fare_quote with passenger_summary and line_items
"""

_DISRUPTIONS = """
## Disruption Handling
- The rider's message carries a DISRUPTION ALERT: check the current service with disruption_feed
- Work out whether the planned route runs through an affected segment or station
- Add advisory_banners with a fitting severity (critical, warning or info) to the submitted state
- If the route is affected, tell the rider and offer an alternative where one exists
- If the disruption leaves the route unusable, set outcome to service_unavailable and kiosk_action to block_purchase
- When a whole line, or a named stretch between two stations, is disrupted, look it up with line_info and pass it to route_planner as line_closures instead of listing stations in station_restrictions
- When several lines are disrupted, ask line_info about all of them at once through its `lines` list
"""

_ACCESSIBILITY = """
## Accessibility
- The rider has told the kiosk about an accessibility need
- Check the stations of the route with station_info and query_type "accessibility"
- Look at every station on the route for working elevators and step-free access
- If a station has a problem (an elevator out of service, say), warn the rider in advisory_banners
- Name the station and the problem in the banner
"""

_KNOWLEDGE = """
## Knowledge Base
- The rider is asking about transit policies or services
- Look the relevant policies up with knowledge_base and their policy_id
- For questions on several topics, make one knowledge_base call per topic
- When unsure which policy applies, search with the query parameter
- Put what you found into the submitted state
- If nothing matches, give a helpful general answer
"""


@dataclass
class SystemFacts:
    """What a system prompt shows of one system: its framebook's names, lines, fares and policies."""

    org_name: str
    full_name: str
    lines: list[str]
    fare_rules: dict[str, Any]
    language: str
    cultural_notes: list[str]
    operating_hours: Any
    card: str
    currency_symbol: str
    policies: list[tuple[str, str]]      # (policy_id, title)


def system_facts(system: SystemData) -> SystemFacts:
    fb = system.framebook_raw
    return SystemFacts(
        org_name=fb["org_name"], full_name=fb["full_name"], lines=[line.name for line in system.lines.values()],
        fare_rules=fare_rules(system), language=fb["primary_language"], cultural_notes=fb.get("cultural_notes") or [],
        operating_hours=fb.get("operating_hours"), card=fb["terminology"]["smartcard"],
        currency_symbol=fb["currency_symbol"], policies=[(p.policy_id, p.title) for p in system.policies])


def system_prompt(system: SystemData, context: dict[str, Any]) -> str:
    """The system prompt of one case (``context`` = the case's ``system_context``)."""
    return render_system_prompt(system_facts(system), context)


def render_system_prompt(facts: SystemFacts, context: dict[str, Any]) -> str:
    """The system prompt for ``facts`` and a case's ``system_context``."""
    parts = [f"You are the ticket kiosk assistant of {facts.org_name} ({facts.full_name}).\n",
             "## System Information",
             f"- Lines: {', '.join(facts.lines)}",
             f"- Fare rules: {json.dumps(facts.fare_rules)}",
             f"- Reply in English (the local language is {facts.language})"]
    text = "\n".join(parts) + "\n"
    if facts.cultural_notes:
        text += "\n## Cultural Notes\n" + "".join(f"- {note}\n" for note in facts.cultural_notes)
    if facts.operating_hours:
        text += f"\n## Service Hours\n{json.dumps(facts.operating_hours)}\n"
    temporal = context.get("temporal_context")
    if temporal:
        text += "\n## Current Time & Service Hours\n"
        text += f"- Current time: {temporal['current_time']}\n"
        if temporal.get("day_of_week"):
            text += f"- Day: {temporal['day_of_week']}\n"
        if temporal.get("notes"):
            text += f"- {temporal['notes']}\n"
        text += "- Check that the journey falls within service hours and warn the rider if it does not\n"
        text += "- Take into account how often trains run at that time\n"
    text += _ROLE + _WORKFLOW + _REASONS + _BANNERS
    text += _RULES.format(card=facts.card, symbol=facts.currency_symbol)
    if context.get("active_disruptions"):
        text += _DISRUPTIONS
    if context.get("accessibility_mode"):
        text += _ACCESSIBILITY
    policy = context.get("policy_change")
    if policy:
        text += ("\n## Policy Update\nIMPORTANT: the policy below is in force and overrides the "
                 "standard fare rules.\n\n" + policy["text"] + "\n\n"
                 "Apply it to the fare. If fare_calculator still quotes the old rules, correct the "
                 "total in submit_assistant_state.\n")
    if facts.policies:
        text += "\n## Available Policies\n"
        text += "".join(f"- [{policy_id}] {title}\n" for policy_id, title in facts.policies)
        text += "Look a policy up exactly with knowledge_base and its policy_id.\n"
    if context.get("knowledge_query"):
        text += _KNOWLEDGE
    return text


def user_turns(case: dict[str, Any]) -> list[str]:
    """A case's user messages, one per turn (``multi_turn_events``, else its single ``events``)."""
    return [user_message(list(turn)) for turn in case.get("multi_turn_events") or [case["events"]]]


def user_message(events: list[dict[str, Any]]) -> str:
    """One line per event, in the reference's line formats (spec §6.3)."""
    lines: list[str] = []
    for event in events:
        kind = event.get("type")
        if kind == "station_selected":
            lines.append(f"{event['field'].title()}: {event['value']}")
        elif kind == "passenger_count_changed":
            counts = [f"{event[k]} {k}" for k in V.RIDER_KEYS if k in event and event[k] != 0]
            lines.append(f"Passengers: {', '.join(counts)}")
        elif kind == "freetext_input":
            lines.append(event["text"])
        elif kind == "payment_method_selected":
            lines.append(f"Payment method: {event['method'].replace('_', ' ').title()}")
        elif kind == "disruption_update":
            message = (event.get("disruption") or {}).get("message", "Service disruption in effect")
            lines.append(f"\u26a0 DISRUPTION ALERT: {message}")
    return "\n".join(lines)


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str] | None) -> dict:
    """One function in the OpenAI format; ``required`` None leaves the key out, as the reference's schema
    does for ``line_info`` and ``disruption_feed`` (``knowledge_base`` states an empty list)."""
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        parameters["required"] = required
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


_S = {"type": "string"}
_I = {"type": "integer"}
_N = {"type": "number"}
_PAX = {"type": "object", "properties": {k: _I for k in V.RIDER_KEYS}}


def _enum(values: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


#: Each function's (description, parameters, required), by tool name (spec §6.4 parameters).
_SCHEMAS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "route_planner": ("Plan the quickest route between two stations, optionally avoiding closed "
        "stations, segments or stretches of line.", {
            "origin": {**_S, "description": "origin station name or id"},
            "destination": {**_S, "description": "destination station name or id"},
            "departure_time": {**_S, "description": "departure time, HH:MM"},
            "accessibility": {"type": "array", "items": _S, "description": "accessibility needs"},
            "station_restrictions": {"type": "array", "items": {
                "type": "object", "properties": {
                    "station": {**_S, "description": "the station's name"},
                    "restriction": {**_enum(V.STATION_RESTRICTIONS),
                                    "description": "closed: no service at all; skip: trains run through "
                                                   "without stopping; no_transfer: no change of line there"}},
                "required": ["station", "restriction"]}, "description": "stations to avoid"},
            "segment_closures": {"type": "array", "items": {"type": "array", "items": _S, "minItems": 2,
                                                            "maxItems": 2},
                                 "description": "closed links between two adjacent stations"},
            "line_closures": {"type": "array", "items": {
                "type": "object", "properties": {
                    "line": {**_S, "description": "the line's id or name"},
                    "from_station": {**_S, "description": "first closed station (leave out both ends "
                                                          "to close the whole line)"},
                    "to_station": {**_S, "description": "last closed station"}},
                "required": ["line"]}, "description": "closed lines, or the stretch between two stations"},
        }, ["origin", "destination"]),
    "fare_calculator": ("Price a planned route (by its route_id) for a group of riders.", {
        "route_id": {**_S, "description": "route_id returned by route_planner"},
        "passengers": _PAX,
        "ticket_type": {"type": "string", "enum": ["single", "return", "day_pass", "weekly", "monthly"]},
        "payment_method": {"type": "string", "enum": [
            "smartcard", "contactless", "cash", "mobile", "gold_travel_card", "clipper_card", "easycard",
            "ventra", "disposable_ticket"]},
    }, ["route_id", "passengers"]),
    "station_info": ("Look up one or more stations: accessibility, facilities, exits, "
        "connections or live status.", {
            "station_id": {**_S, "description": "one station's id or name"},
            "station_ids": {"type": "array", "items": _S, "description": "several stations at once"},
            "query_type": _enum(V.STATION_QUERY_TYPES),
        }, ["query_type"]),
    "line_info": ("Describe one or more lines: their stations in order, terminals and "
        "connections.", {"line": {**_S, "description": "one line's id or name"},
                         "lines": {"type": "array", "items": _S, "description": "several lines at once"}},
        None),
    "disruption_feed": ("Current service disruptions, optionally for one line or station.", {
        "line": {**_S, "description": "only this line"},
        "station": {**_S, "description": "only this station"},
        "severity_filter": {**_enum(V.SEVERITY_FILTERS), "description": "which severities (all by default)"},
    }, None),
    "knowledge_base": ("Search the operator's policies, or fetch one by its policy_id.", {
        "policy_id": {**_S, "description": "a policy id from the list of available policies"},
        "query": {**_S, "description": "words to search for when no policy id fits"},
        "category": {**_S, "description": "narrow the search to one category"}}, []),
    "submit_assistant_state": ("Submit the final kiosk state. Call this once everything is known; "
        "it ends the turn.", {
            "outcome": {**_enum(V.OUTCOMES), "description": "how the interaction ends"},
            "route": {"type": "object", "description": "the journey; needed for route_and_fare_ready and "
                                                        "advisory_only", "properties": {
                "origin": _S, "destination": _S,
                "stops": {"type": "array", "items": {"type": "object", "properties": {
                    "station_id": _S, "station_name": _S, "line": _S, "is_transfer": {"type": "boolean"}},
                    "required": ["station_id"]}, "description": "the stop objects route_planner returned"},
                "transfers": _I, "estimated_minutes": _I, "distance_miles": _N,
                "line_sequence": {"type": "array", "items": _S, "description": "the lines taken, in order"},
            }, "required": ["origin", "destination", "stops", "transfers", "estimated_minutes",
                            "distance_miles", "line_sequence"]},
            "fare_quote": {"type": "object", "description": "the price; needed for route_and_fare_ready",
                           "properties": {
                "passenger_summary": {"type": "object", "properties": {
                    **{k: {"type": "integer", "default": 0} for k in V.RIDER_KEYS},
                    "free_riders": {"type": "integer", "default": 0}}},
                "line_items": {"type": "array", "items": {"type": "object", "properties": {
                    "rider_type": _S, "count": _I, "unit_fare": _N, "subtotal": _N, "currency": _S},
                    "required": ["rider_type", "count", "unit_fare", "subtotal", "currency"]}},
                "discounts": {"type": "array", "items": {"type": "object", "properties": {
                    "label": _S, "amount": _N, "currency": _S}}},
                "total": {"type": "number", "description": "the total as a number, not a string"},
                "currency": _S,
            }, "required": ["total", "currency"]},
            "kiosk_action": {"type": "object", "description": "what the kiosk does next", "properties": {
                "action": _enum(V.ACTIONS),
                "reason_code": _enum(V.REASON_CODES),
            }, "required": ["action", "reason_code"]},
            "advisory_banners": {"type": "array", "items": {"type": "object", "properties": {
                "severity": _enum(V.BANNER_SEVERITIES),
                "title": _S, "body": _S}, "required": ["severity", "title", "body"]}},
            "assistant_message": {**_S, "description": "what the kiosk says to the rider"},
            "reasoning": {**_S, "description": "a short account of how you decided"},
        }, ["outcome", "kiosk_action", "assistant_message"]),
}
#: The seven functions offered to the model (OpenAI function format), in the vocabulary's order.
TOOLS: list[dict[str, Any]] = [_fn(name, *_SCHEMAS[name]) for name in V.TOOLS]


#: Placeholders for a system's facts, a case's context and its events: rendered with them, the
#: templates show every section and line format the model can be given, and nothing of the data.
_PLACEHOLDER_FACTS = SystemFacts(
    org_name="<org_name>", full_name="<full_name>", lines=["<line>", "<line>"],
    fare_rules={"model": "<model>", "base_fare": "<symbol><fare>"}, language="<language>",
    cultural_notes=["<note>"], operating_hours={"<day>": "<hours>"}, card="<card>", currency_symbol="<symbol>",
    policies=[("<policy_id>", "<title>")])
_PLACEHOLDER_CONTEXT: dict[str, Any] = {
    "temporal_context": {"current_time": "<time>", "day_of_week": "<day>", "notes": "<notes>"},
    "active_disruptions": ["<disruption>"], "accessibility_mode": True,
    "policy_change": {"text": "<policy>"}, "knowledge_query": True}
_PLACEHOLDER_EVENTS: list[dict[str, Any]] = [
    {"type": "station_selected", "field": "origin", "value": "<station>"},
    {"type": "passenger_count_changed", **{key: 1 for key in V.RIDER_KEYS}},
    {"type": "freetext_input", "text": "<text>"},
    {"type": "payment_method_selected", "method": "<method>"},
    {"type": "disruption_update", "disruption": {"message": "<message>"}},
    {"type": "disruption_update"}]


@cache
def prompt_digest() -> str:
    """SHA-256 (16 hex) of what the model is told, rendered with placeholders: the system prompt with
    every section, a user message with every event kind, and the tool schemas (part of a run's fingerprint)."""
    rendered = {"system": render_system_prompt(_PLACEHOLDER_FACTS, _PLACEHOLDER_CONTEXT),
                "user": user_message(_PLACEHOLDER_EVENTS), "tools": TOOLS}
    blob = json.dumps(rendered, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
