"""The sixteen components computed without a judge (spec §7.3), one function each.

Every function takes a :class:`CaseView` and returns ``(raw score, reason)``;
the caller clamps to the case's maximum. Each is declared with its name, tier
and default maximum by :func:`~metrobench.scoring.registry.component`. The
arithmetic, the order of the checks and the quirks are the reference scorer's,
so the default scores equal its scores case for case. Corrections of its known defects (spec §13) are
opt-in errata, tested here by name (see :mod:`metrobench.scoring.errata`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from metrobench import vocabulary as V
from metrobench.scoring import errata as E
from metrobench.scoring.coerce import as_dict, as_list, as_number, as_text
from metrobench.scoring.registry import component, spec
from metrobench.vocabulary import SUBMIT_TOOL

#: Disruption types the scorer treats as a full suspension when critical (the reference's set).
FULL_SUSPENSION_TYPES = frozenset({"hurricane_warning", "sandstorm_warning", "typhoon_warning",
                                   "polar_vortex"})
VALID_TOOLS = frozenset(V.TOOLS)
PLANNING_TOOLS = frozenset(V.PLANNING_TOOLS)
WRONG_CARD_TERMS = ("metro card", "oyster", "octopus", "suica")
ACCESSIBILITY_ALARMS = ("elevator out", "not accessible", "no elevator", "elevator closed",
                        "step-free unavailable", "accessibility issue", "accessibility problem")

Score = tuple[float, str]


def response_text(response: dict[str, Any] | None, raw_content: Any) -> str:
    """The readable text of an answer: what keyword checks search and the judge reads.

    Reasoning, message, one line per banner, outcome and kiosk action; the raw
    text when there is no structured answer. Route and fare objects are left
    out, as in the reference.
    """
    if not response:
        return as_text(raw_content)
    parts = []
    reasoning = response.get("reasoning", "")
    if reasoning:
        parts.append(f"Reasoning: {reasoning}")
    ui = as_dict(response.get("ui_updates", {}))
    message = ui.get("assistant_message", "")
    if message:
        parts.append(f"Message: {message}")
    for banner in as_list(ui.get("advisory_banners", [])):
        if isinstance(banner, dict):
            parts.append(f"Advisory [{banner.get('severity', '?')}]: {banner.get('title', '')}"
                         f" \u2014 {banner.get('body', '')}")
    outcome = response.get("outcome", "")
    if outcome:
        parts.append(f"Outcome: {outcome}")
    action = as_dict(response.get("kiosk_action", {}))
    if action:
        parts.append(f"Kiosk action: {action.get('action', '?')} ({action.get('reason_code', '?')})")
    return "\n".join(parts) if parts else as_text(raw_content)


@dataclass
class CaseView:
    """One case and one answer to it, with the derived facts several components share."""

    case: dict[str, Any]
    response: dict[str, Any] | None
    raw_content: Any
    calls: list[dict[str, Any]]
    currency_symbol: str
    smartcard: str
    errata: frozenset[str] = field(default_factory=frozenset)
    facts: str = ""  # the operator facts the fabrication judge is shown (rubrics.operator_facts)

    @property
    def gt(self) -> dict[str, Any]:
        return self.case.get("ground_truth", {})

    @property
    def scoring(self) -> dict[str, Any]:
        return self.case.get("scoring", {})

    def maximum(self, name: str) -> float:
        """Component ``name``'s maximum here: the case's ``scoring`` value, else its declared default."""
        default = spec(name).max_points
        return self.scoring[name] if default is None else self.scoring.get(name, default)

    @property
    def tolerances(self) -> dict[str, Any]:
        return self.case.get("tolerances", {})

    @property
    def category(self) -> str:
        return self.case.get("category", "")

    @property
    def ui(self) -> dict[str, Any]:
        return as_dict((self.response or {}).get("ui_updates", {}))

    @cached_property
    def text(self) -> str:
        return response_text(self.response, self.raw_content)

    @cached_property
    def called(self) -> set[str]:
        return {call["name"] for call in self.calls}

    @cached_property
    def full_suspension(self) -> bool:
        disruptions = self.case.get("system_context", {}).get("active_disruptions") or []
        return any(isinstance(d, dict) and d.get("type") in FULL_SUSPENSION_TYPES and d.get("severity") == "critical"
                   for d in disruptions)

    @cached_property
    def temporal_no_service(self) -> bool:
        return (self.gt.get("route") is None
                and self.gt.get("temporal", {}).get("service_available") is False)

    def has(self, erratum: str) -> bool:
        return erratum in self.errata


def _advisory_only_as_expected(view: CaseView) -> bool:
    """The GT expects advisory_only and the answer gave it."""
    return (view.gt.get("expected_outcome") == "advisory_only"
            and (view.response or {}).get("outcome") == "advisory_only")


def _no_service_omission(view: CaseView, key: str, maximum: float, what: str) -> Score:
    if not view.ui.get(key):
        return maximum, f"Correctly omitted {what} (no service)"
    if (key == "route" and view.has(E.WEATHER_SUSPENSION) and view.full_suspension
            and _advisory_only_as_expected(view)):
        return maximum, "Route present because advisory_only requires one (erratum weather-suspension)"
    return 0, f"Should not include {what} during full suspension"


def _nothing_to_compare(view: CaseView, name: str, key: str, what: str) -> Score | None:
    """Route's and fare's score when there is nothing to compare: no service, or no parseable answer."""
    if view.full_suspension or view.temporal_no_service:
        return _no_service_omission(view, key, view.maximum(name), what)
    if not view.response:
        return 0, "No parseable response"
    return None


@component("route_correct", tier=1)
def route_correct(view: CaseView) -> Score:
    early = _nothing_to_compare(view, "route_correct", "route", "route")
    if early is not None:
        return early
    quoted = view.ui.get("route", {})
    gt_route = view.gt.get("route") or {}
    if not gt_route:
        admissible = set(view.gt.get("admissible_outcomes", []))
        if quoted and "route_and_fare_ready" in admissible:
            return 10, "OK (no GT route; admissible alternative with route quoted)"
        if quoted:
            return 0, f"No route expected (outcome={view.gt.get('expected_outcome')}) but one was quoted"
        return 10, "OK (no route expected)"
    route = as_dict(quoted)
    if not route:
        return 0, "No route in response"

    score, problems = 0.0, []
    gt_transfers = gt_route.get("transfers", 0)
    transfers = as_number(route.get("transfers"))
    if route.get("transfers") is not None and transfers is None:
        problems.append("transfers not a number")
    if transfers is not None and transfers == gt_transfers:
        score += 5
    elif transfers is not None and abs(transfers - gt_transfers) <= 1:
        score += 3
        problems.append(f"transfers off by {abs(transfers - gt_transfers)}")
    else:
        problems.append("transfers incorrect or missing")

    tolerance = view.tolerances.get("distance_miles", 2.0)
    gt_distance = gt_route.get("distance_miles", 0)
    distance = as_number(route.get("distance_miles") or route.get("distance_km"))
    if distance is not None and abs(distance - gt_distance) <= tolerance:
        score += 5
    elif distance is not None:
        problems.append(f"distance {distance} vs expected {gt_distance}")
    else:
        problems.append("no distance in response")

    gt_lines = {str(line).lower() for line in gt_route.get("line_sequence", [])}
    lines = route.get("line_sequence") or route.get("lines", [])
    if not lines and route.get("line"):
        lines = [route["line"]]
    if lines and not isinstance(lines, (list, tuple, str, dict)):
        lines = [lines]
    got = {str(line).lower() for line in lines} if lines else set()
    if got and got == gt_lines:
        score += 5
    elif got:
        problems.append(f"lines {sorted(got)} vs expected {sorted(gt_lines)}")
    else:
        problems.append("no line sequence in response")
    return score, "; ".join(problems) or "OK"


def _advisory_fare_waived(view: CaseView) -> bool:
    return view.has(E.ADVISORY_FARE) and _advisory_only_as_expected(view) and not view.ui.get("fare_quote")


@component("fare_correct", tier=1)
def fare_correct(view: CaseView) -> Score:
    early = _nothing_to_compare(view, "fare_correct", "fare_quote", "fare")
    if early is not None:
        return early
    fare = as_dict(view.ui.get("fare_quote") or {})
    gt_fare = view.gt.get("fare") or {}
    if not gt_fare:
        quoted = bool(fare) and fare.get("total") is not None
        if quoted and "route_and_fare_ready" in set(view.gt.get("admissible_outcomes", [])):
            return 15, "OK (no GT fare; admissible alternative with fare quoted)"
        if quoted:
            return 0, f"No fare expected (outcome={view.gt.get('expected_outcome')}) but one was quoted"
        return 15, "OK (no fare expected)"
    if _advisory_fare_waived(view):
        return 15, "No fare quoted with advisory_only (erratum advisory-fare)"

    tolerance = view.tolerances.get("fare", view.tolerances.get("fare_usd", 0.50))
    total = fare.get("total")
    if total is None:
        return 0, "No fare total in response"
    symbol = view.currency_symbol or "$"
    try:
        if isinstance(total, str):
            total = float(total.replace(symbol, "").replace("$", "").replace(",", "").strip())
        else:
            total = float(total)
        gt_total = float(gt_fare.get("total", 0))
    except (ValueError, TypeError):
        return 0, f"Cannot parse fare total: {total!r}"
    if abs(total - gt_total) <= tolerance:
        if total == gt_total:
            return 20, "Exact match"
        return 15, f"Within tolerance: {symbol}{total} vs {symbol}{gt_total}"
    return 0, f"Fare incorrect: {symbol}{total} vs expected {symbol}{gt_total} (tolerance {symbol}{tolerance})"


def _needs_reroute(gt: dict[str, Any]) -> bool:
    post = gt.get("post_disruption", {}) or {}
    return post.get("alternative_route") is not None and not post.get("route_still_valid", True)


@component("tool_calls_correct", tier=1, max_points=10)
def tool_calls_correct(view: CaseView) -> Score:
    if not view.calls:
        return 0, "No tool calls made"
    called, category, gt = view.called, view.category, view.gt
    expected: set[str] = set()
    if category in ("A", "E"):
        expected = {"route_planner"}
    elif category in ("B", "F", "G"):
        expected = {"route_planner", "fare_calculator"}
    elif category == "C":
        if view.full_suspension:
            expected = {"disruption_feed"}
        elif _needs_reroute(gt):
            expected = {"route_planner", "fare_calculator", "disruption_feed"}
        else:
            expected = {"route_planner", "disruption_feed"}
    elif category == "D":
        expected = {"route_planner", "station_info"}
    elif category == "H":
        acceptable = set(gt.get("acceptable_tools", []))
        if not acceptable:
            planning = called & PLANNING_TOOLS
            if not planning:
                return 10, "Correctly abstained from planning tools"
            return 3, f"Called unnecessary tools: {sorted(planning)}"
        if acceptable & called:
            return 10, f"Used correct tools: {sorted(acceptable & called)}"
        return 5, f"Called {sorted(called)}, expected {sorted(acceptable)}"
    elif category == "J":
        acceptable = set(gt.get("acceptable_tools", []))
        if acceptable & called:
            return 15, f"Used correct tools: {sorted(acceptable & called)}"
        if gt.get("should_reject"):
            rest = called - {SUBMIT_TOOL}
            if not rest or rest <= {"knowledge_base"}:
                return 15, "Correctly declined or used knowledge_base"
            return 5, f"Should have declined, called: {sorted(called)}"
        return 5, f"Called {sorted(called)}, expected {sorted(acceptable)}"
    elif category == "I":
        if gt.get("temporal", {}).get("service_available", True):
            expected = {"route_planner", "fare_calculator"}
        else:
            rest = called - {SUBMIT_TOOL}
            if not rest:
                return 10, "Only submitted (no service)"
            if rest <= {"route_planner"}:
                return 7, "Called route_planner before recognising there is no service"
            return 3, f"Called {sorted(called)} when service is unavailable"
    elif category == "K":
        context = view.case.get("system_context", {})
        expected = {"route_planner"}
        if context.get("active_disruptions"):
            expected.add("disruption_feed")
        if context.get("accessibility_mode"):
            expected.add("station_info")
        if "fare_correct" in view.scoring:
            expected.add("fare_calculator")
    if expected and expected <= called:
        return 10, f"All expected tools called: {sorted(called)}"
    if expected & called:
        return 5, f"Partial: called {sorted(called)}, expected {sorted(expected)}"
    return 2, f"Called {sorted(called)}, expected {sorted(expected)}"


@component("no_tool_hallucination", tier=1, max_points=10)
def no_tool_hallucination(view: CaseView) -> Score:
    maximum = view.maximum("no_tool_hallucination")
    traps = set(view.gt.get("hallucination_traps", []) or [])
    if traps:
        trapped = [call["name"] for call in view.calls if call["name"] in traps]
        if trapped:
            return 0, f"Fell for hallucination traps: {trapped}"
    invented = [call["name"] for call in view.calls if call["name"] not in VALID_TOOLS]
    if invented:
        return max(0, maximum - (maximum // 2) * len(invented)), f"Hallucinated: {invented}"
    return maximum, "No hallucinated tools"


@component("renderable_state_validity", tier=1, max_points=5)
def renderable_state_validity(view: CaseView) -> Score:
    response = view.response
    if response is None:
        return 0, "Response not valid JSON" if view.raw_content else "Empty response"
    ui = as_dict(response.get("ui_updates"))
    checks = {
        "outcome": bool(response.get("outcome")),
        "kiosk_action": bool(response.get("kiosk_action")),
        "ui_updates": "ui_updates" in response,
        "assistant_message": bool(ui.get("assistant_message")),
    }
    passed = sum(checks.values())
    if passed == 4:
        outcome = response.get("outcome", "")
        if outcome in ("route_and_fare_ready", "advisory_only") and not ui.get("route"):
            return 3, f"Missing route for outcome={outcome}"
        if outcome == "route_and_fare_ready" and not ui.get("fare_quote"):
            return 3, "Missing fare_quote for outcome=route_and_fare_ready"
        return 5, "Valid renderable state"
    if passed >= 2:
        missing = [k for k in ("outcome", "kiosk_action", "assistant_message") if not checks[k]]
        return 3, f"Partial state: missing {', '.join(missing)}"
    return 1, "Valid JSON but missing expected structure"


def _admissible_outcomes(view: CaseView) -> list[Any]:
    admissible = list(view.gt.get("admissible_outcomes") or [])
    if view.has(E.PROMPT_CONFLICTS) and E.is_unusable_route_case(view.case):
        admissible.append("service_unavailable")
    if view.has(E.WEATHER_SUSPENSION) and view.full_suspension:
        admissible.append("service_unavailable")
    return admissible


@component("outcome_correct", tier=1)
def outcome_correct(view: CaseView) -> Score:
    if not view.response:
        return 0, "No response"
    outcome = view.response.get("outcome", "")
    expected = view.gt.get("expected_outcome", "")
    if outcome == expected:
        return 5, f"Correct outcome: {outcome}"
    admissible = _admissible_outcomes(view)
    if admissible and outcome in admissible:
        return 5, f"Admissible outcome: {outcome}"
    return 0, f"Wrong outcome: {outcome!r}, expected {expected!r}"


@component("purchase_gate_correct", tier=1)
def purchase_gate_correct(view: CaseView) -> Score:
    if not view.response:
        return 0, "No response"
    kiosk = as_dict(view.response.get("kiosk_action", {}))
    action, reason = kiosk.get("action", ""), kiosk.get("reason_code", "")
    gt = view.gt
    expected_action = gt.get("expected_kiosk_action", "")
    expected_reason = gt.get("expected_reason_code", "")
    admissible_actions = list(gt.get("admissible_kiosk_actions") or [])
    admissible_reasons: list[str] = []
    if view.has(E.PROMPT_CONFLICTS):
        if E.is_unusable_route_case(view.case):
            admissible_actions.append("block_purchase")
            admissible_reasons.append("no_service")
        if view.category == "F":
            admissible_reasons.append("policy_exception")
    if view.has(E.UNATTAINABLE_REASON) and expected_reason not in V.REASON_CODES:
        admissible_reasons.append("accessibility_issue")
    score, notes = 0.0, []
    if action == expected_action:
        score += 2.5
        notes.append("action OK")
    elif admissible_actions and action in admissible_actions:
        score += 2.5
        notes.append("action OK (admissible)")
    else:
        notes.append(f"action {action!r} != {expected_action!r}")
    if reason == expected_reason:
        score += 2.5
        notes.append("reason OK")
    elif reason in admissible_reasons:
        score += 2.5
        notes.append("reason OK (erratum)")
    else:
        notes.append(f"reason {reason!r} != {expected_reason!r}")
    return score, "; ".join(notes)


@component("fare_breakdown_correct", tier=1)
def fare_breakdown_correct(view: CaseView) -> Score:
    if not view.response:
        return 0, "No response"
    fare = as_dict(view.ui.get("fare_quote") or {})
    items = as_list(fare.get("line_items", []))
    expected = view.gt.get("expected_fare_breakdown", {}).get("line_items", [])
    if not expected:
        return 5, "No expected breakdown (skipped)"
    if not items:
        return 0, "No line_items in fare_quote"
    tolerance = view.tolerances.get("fare", 0.50)
    matched = 0
    for want in expected:
        for item in items:
            if not isinstance(item, dict):
                continue
            unit = as_number(item.get("unit_fare", -999))
            if (as_text(item.get("rider_type", "")).lower() == want.get("rider_type", "").lower()
                    and item.get("count") == want.get("count")
                    and unit is not None
                    and abs(float(unit) - float(want.get("unit_fare", 0))) <= tolerance):
                matched += 1
                break
    score = round(5 * matched / len(expected), 1)
    if matched == len(expected):
        return score, f"All {matched} line items correct"
    return score, f"{matched}/{len(expected)} line items correct"


def expected_passengers(case: dict[str, Any]) -> dict[str, Any]:
    """Passenger counts to expect: the GT summary if any, else the events' last values per key."""
    summary = case.get("ground_truth", {}).get("expected_fare_breakdown", {}).get("passenger_summary")
    if summary:
        return summary
    expected = {key: 0 for key in V.PASSENGER_SUMMARY_KEYS}
    for event in case.get("events", []):
        if event.get("type") == "passenger_count_changed":
            for key in V.PASSENGER_SUMMARY_KEYS:
                if key in event:
                    expected[key] = event[key]
    return expected


def _passenger_field(want: Any, got: Any) -> tuple[bool, bool]:
    """(counted, correct) for one passenger key, exactly as the reference decides it.

    The reference evaluates ``want > 0 or got > 0`` and then ``got == want``
    on the value as written. When ``want > 0`` the first test short-circuits,
    so a count written as a string (``"2"``) is counted and is simply not equal
    to the number: no coercion there. Only when ``want`` is not positive does
    it compare ``got > 0``, which raises on a string or ``null``; there alone
    the value is read as a number (unreadable: 0).
    """
    if want > 0:
        return True, got == want
    if not isinstance(got, (int, float)):
        got = as_number(got)
        got = 0 if got is None else got
    if got > 0:
        return True, got == want
    return False, False


@component("passenger_summary_correct", tier=1)
def passenger_summary_correct(view: CaseView) -> Score:
    if not view.response:
        return 0, "No response"
    fare = as_dict(view.ui.get("fare_quote") or {})
    summary = as_dict(fare.get("passenger_summary") or {})
    if not summary:
        return 0, "No passenger_summary in fare_quote"
    expected = expected_passengers(view.case)
    correct = counted = 0
    for key in V.PASSENGER_SUMMARY_KEYS:
        counts, right = _passenger_field(expected.get(key, 0), summary.get(key, 0))
        counted += counts
        correct += right
    if counted == 0:
        return 5, "No passengers to check"
    if correct == counted:
        return 5, f"All {correct} passenger fields correct"
    if correct:
        return 3, f"{correct}/{counted} passenger fields correct"
    return 0, f"No passenger fields correct (expected {expected})"


def _required_terms(case: dict[str, Any]) -> set[str]:
    must = case.get("ground_truth", {}).get("cultural_response", {}) or {}
    return {str(term).lower() for term in must.get("must_mention", []) or []}


@component("framebook_conformance", tier=2, max_points=5)
def framebook_conformance(view: CaseView) -> Score:
    if not view.response:
        return 0, "No response"
    dumped = json.dumps(view.response, ensure_ascii=not view.has(E.BEIJING_CURRENCY))
    lowered = dumped.lower()
    score, notes = 0.0, []
    symbol = view.currency_symbol or "$"
    if symbol in dumped:
        score += 2
    else:
        notes.append(f"missing {symbol} currency symbol")
    exempt = _required_terms(view.case) if view.has(E.CULTURAL_TERMS) else set()
    for term in WRONG_CARD_TERMS:
        if term in lowered and term not in exempt:
            notes.append(f"wrong term: {term}")
            score -= 1
    if view.smartcard and view.smartcard.lower() in lowered:
        score += 3
    else:
        notes.append(f"doesn't mention {view.smartcard}")
    return max(0, min(5, score)), "; ".join(notes) or "OK"


@component("disruption_detected", tier=1)
def disruption_detected(view: CaseView) -> Score:
    if "disruption_feed" in view.called:
        return 15, "Called disruption_feed"
    if view.response:
        lowered = json.dumps(view.response).lower()
        keywords = (view.gt.get("post_disruption") or {}).get("advisory_must_mention", [])
        if any(str(k).lower() in lowered for k in keywords):
            return 8, "Mentioned the disruption without calling disruption_feed"
    return 0, "Disruption not detected"


@component("advisory_issued", tier=1)
def advisory_issued(view: CaseView) -> Score:
    if not view.response:
        return 0, "No response"
    banners = as_list(view.ui.get("advisory_banners", []))
    if not banners:
        return 0, "No advisory banners issued"
    expected = (view.gt.get("post_disruption") or {}).get("advisory_severity", "warning")
    severities = [as_text(as_dict(b).get("severity", "")).lower() for b in banners]
    if expected.lower() in severities:
        return 10, f"Advisory issued with correct severity: {expected}"
    return 5, f"Advisory issued but severity mismatch: {severities} vs expected {expected}"


@component("accessibility_accuracy", tier=2)
def accessibility_accuracy(view: CaseView) -> Score:
    score, notes = 0.0, []
    if any(call["name"] == "station_info"
           and as_dict(call.get("arguments")).get("query_type") == "accessibility"
           for call in view.calls):
        score += 5
    else:
        notes.append("did not call station_info with query_type=accessibility")
    text = ""
    if view.response:
        ui = view.ui
        for banner in as_list(ui.get("advisory_banners", [])):
            banner = as_dict(banner)
            text += f" {banner.get('title', '')} {banner.get('body', '')}"
        text += f" {ui.get('assistant_message', '')}"
        text += f" {view.response.get('reasoning', '')}"
    text = text.lower()
    issues = view.gt.get("accessibility", {}).get("issues_on_route", [])
    if not issues:
        if not any(alarm in text for alarm in ACCESSIBILITY_ALARMS):
            score += 5
        else:
            notes.append("false alarm: mentioned accessibility problems when none exist")
    else:
        names = [issue["station_name"] for issue in issues]
        found = [name for name in names if name.lower() in text]
        if len(found) == len(names):
            score += 5
            notes.append(f"all issue stations mentioned: {found}")
        elif found:
            score += 3
            notes.append(f"partial: mentioned {found}, missing {[n for n in names if n not in found]}")
        else:
            notes.append(f"no issue stations mentioned, expected: {names}")
    return score, "; ".join(notes) or "OK"


@component("cultural_accuracy", tier=1)
def cultural_accuracy(view: CaseView) -> Score:
    maximum = view.maximum("cultural_accuracy")
    keywords = view.gt.get("cultural_response", {}).get("must_mention", [])
    if not keywords:
        return maximum, "No must_mention keywords specified"
    text = view.text.lower()
    if not text.strip():
        return 0, "No response"
    found = [k for k in keywords if k.lower() in text]
    missing = [k for k in keywords if k.lower() not in text]
    if not missing:
        return maximum, f"All {len(keywords)} must_mention keywords present"
    if not found:
        return 0, f"No must_mention keywords found (missing: {missing})"
    return maximum * len(found) / len(keywords), f"{len(found)}/{len(keywords)} present (missing: {missing})"


@component("context_update_detected", tier=1)
def context_update_detected(view: CaseView) -> Score:
    if not view.calls:
        return 0, "No tool calls"
    accepted = [i for i, call in enumerate(view.calls)
                if call["name"] == SUBMIT_TOOL
                and as_dict(call.get("result") or {}).get("accepted")]
    if len(accepted) <= 1:
        return 0, "Single submission only: no re-planning detected"
    between = {call["name"] for call in view.calls[accepted[0] + 1:accepted[-1]]
               if call["name"] in ("route_planner", "fare_calculator")}
    if between:
        return 5, f"Re-planned between submissions: {sorted(between)}"
    return 2, "Multiple submissions but no re-planning between them"


@component("re_planning_efficiency", tier=1)
def re_planning_efficiency(view: CaseView) -> Score:
    case_id = view.case.get("id", "")
    category = case_id.split("-")[1] if "-" in case_id else ""
    if category == "C":
        if not _needs_reroute(view.gt):
            return 5, "No re-routing needed"
        planner = [call for call in view.calls if call["name"] == "route_planner"]
        restricted = any(as_dict(call.get("arguments", {})).get(key)
                         for call in planner
                         for key in ("station_restrictions", "segment_closures", "line_closures"))
        if len(planner) >= 2 and restricted:
            return 5, "Re-routed with disruption-aware restrictions"
        if len(planner) >= 2:
            return 3, "Re-called route_planner but without restrictions"
        return 0, f"Did not re-route ({len(planner)} route_planner calls)"

    route_turns = fare_turns = 0
    for turn in (view.case.get("multi_turn_events") or [])[1:]:
        kinds = {event.get("type") for event in turn}
        if "station_selected" in kinds:
            route_turns += 1
        elif kinds & {"passenger_count_changed", "payment_method_selected"}:
            fare_turns += 1
    names = [call["name"] for call in view.calls]
    if route_turns == 0 and fare_turns == 0:
        if "route_planner" in names:
            return 10, "No state changes; route_planner called"
        return 0, "No route_planner called"
    planner, fares = names.count("route_planner"), names.count("fare_calculator")
    expected_routes = 1 + route_turns
    route_ok = planner >= expected_routes
    recalcs = max(0, planner - expected_routes) + (max(0, fares - 1) if fares > 0 else 0)
    fare_ok = fare_turns == 0 or recalcs >= fare_turns
    if route_ok and fare_ok:
        return 10, f"Re-planned correctly ({planner} route, {fares} fare calls)"
    if route_ok or fare_ok:
        return 5, (f"Partial: route={'OK' if route_ok else 'MISS'} ({planner}/{expected_routes}), "
                   f"fare={'OK' if fare_ok else 'MISS'}")
    return 0, f"No re-planning ({planner} route, {fares} fare calls)"

