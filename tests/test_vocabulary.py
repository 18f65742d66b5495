"""The vocabulary against everything that spells it: tool schemas, contract, tools, scorer, data, prompts."""

from __future__ import annotations

import hashlib
import json

import pytest

from metrobench import vocabulary as V
from metrobench.agents.prompts import TOOLS, system_prompt, user_turns
from metrobench.data import SYSTEMS
from metrobench.data.partition import committed_split
from metrobench.kiosk.tools.dispatch import TOOLS as SERVED
from metrobench.kiosk.tools.dispatch import call_tool
from metrobench.kiosk.tools.session import ToolSession
from metrobench.kiosk.tools.schemas import PassengerCounts
from metrobench.scoring import rubrics as R
from metrobench.scoring.components import PLANNING_TOOLS, VALID_TOOLS

SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"]["properties"] for tool in TOOLS}


def _enum(schema: dict) -> tuple[str, ...]:
    return tuple(schema["enum"])


def test_the_schemas_offer_the_vocabularys_tools_in_its_order():
    assert tuple(SCHEMAS) == V.TOOLS == tuple(SERVED)
    assert VALID_TOOLS == frozenset(V.TOOLS)
    assert PLANNING_TOOLS == frozenset(V.PLANNING_TOOLS) < VALID_TOOLS
    assert set(V.SCOPE_TOOLS) < set(V.TOOLS) and V.SUBMIT_TOOL == V.TOOLS[-1]


def test_schema_enums_are_the_vocabulary():
    submit = SCHEMAS["submit_assistant_state"]
    action = submit["kiosk_action"]["properties"]
    assert _enum(submit["outcome"]) == V.OUTCOMES
    assert _enum(action["action"]) == V.ACTIONS
    assert _enum(action["reason_code"]) == V.REASON_CODES
    assert _enum(submit["advisory_banners"]["items"]["properties"]["severity"]) == V.BANNER_SEVERITIES
    assert _enum(SCHEMAS["station_info"]["query_type"]) == V.STATION_QUERY_TYPES
    assert _enum(SCHEMAS["disruption_feed"]["severity_filter"]) == V.SEVERITY_FILTERS
    restriction = SCHEMAS["route_planner"]["station_restrictions"]["items"]["properties"]["restriction"]
    assert _enum(restriction) == V.STATION_RESTRICTIONS


def test_rider_keys_are_the_same_everywhere():
    assert tuple(SCHEMAS["fare_calculator"]["passengers"]["properties"]) == V.RIDER_KEYS
    summary = SCHEMAS["submit_assistant_state"]["fare_quote"]["properties"]["passenger_summary"]
    assert tuple(summary["properties"]) == V.PASSENGER_SUMMARY_KEYS
    assert tuple(PassengerCounts.model_fields) == V.RIDER_KEYS


def _submit(bench, **kiosk) -> tuple[int, object]:
    state = {"outcome": "policy_answer_only", "assistant_message": "ok",
             "kiosk_action": {"action": "display_info", "reason_code": "ok"}}
    for key, value in kiosk.items():
        if key == "outcome":
            state["outcome"] = value
        else:
            state["kiosk_action"] = {**state["kiosk_action"], key: value}
    answer = call_tool(ToolSession(bench.system("marta")), "submit_assistant_state", state)
    return answer.status, answer.body


def test_the_contract_accepts_exactly_the_vocabulary(bench):
    for outcome in V.OUTCOMES:
        status, body = _submit(bench, outcome=outcome)
        needs_route = outcome in V.OUTCOMES_NEEDING_ROUTE
        assert status == (422 if needs_route else 200), (outcome, body)
        if needs_route:
            assert body == {"detail": f"route required when outcome={outcome}"}
    assert all(_submit(bench, action=action)[0] == 200 for action in V.ACTIONS)
    assert all(_submit(bench, reason_code=code)[0] == 200 for code in V.REASON_CODES)
    assert _submit(bench, outcome="route_ready") == (422, {"detail": "Invalid outcome: route_ready"})
    assert _submit(bench, action="sell") == (422, {"detail": "Invalid action: sell"})
    assert _submit(bench, reason_code="fine") == (422, {"detail": "Invalid reason_code: fine"})


def test_station_info_accepts_exactly_the_query_types(bench):
    session = ToolSession(bench.system("marta"))
    for query in V.STATION_QUERY_TYPES:
        assert call_tool(session, "station_info", {"station_id": "MARTA-AP", "query_type": query}).ok
    assert call_tool(session, "station_info", {"station_id": "MARTA-AP", "query_type": "toilets"}).status == 422


def test_the_data_stays_within_the_vocabulary(bench):
    categories, event_keys, summary_keys, outcomes, actions, reasons = set(), set(), set(), set(), set(), set()
    for system in SYSTEMS:
        for case in bench.cases(system):
            raw = case.raw
            categories.add(case.category)
            assert case.id.split("-")[1] == case.category
            for turn in raw.get("multi_turn_events") or [raw["events"]]:
                for event in turn:
                    if event["type"] == "passenger_count_changed":
                        event_keys |= set(event) - {"type"}
            gt = raw["ground_truth"]
            summary_keys |= set(gt.get("expected_fare_breakdown", {}).get("passenger_summary") or {})
            outcomes.add(gt["expected_outcome"])
            actions.add(gt["expected_kiosk_action"])
            reasons.add(gt["expected_reason_code"])
    assert categories == set(V.CATEGORIES)
    assert event_keys <= set(V.RIDER_KEYS) and summary_keys == set(V.PASSENGER_SUMMARY_KEYS)
    assert outcomes <= set(V.OUTCOMES) and actions <= set(V.ACTIONS)
    assert reasons - set(V.REASON_CODES) == {"no_accessible_alternative"}  # MARTA-D-016, spec §13


def test_the_split_counts_the_whole_set_under_the_canonical_word(bench):
    split = committed_split(bench)
    assert set(split["totals"]) == set(V.SELECTIONS)
    assert V.is_whole(V.WHOLE) and V.is_whole(V.WHOLE_IN_REPORTS)
    assert not any(V.is_whole(part) for part in V.PARTS)
    # a report's --partition takes either word and writes the reports' one; the parts pass through
    assert V.report_partition(V.WHOLE) == V.report_partition(V.WHOLE_IN_REPORTS) == V.WHOLE_IN_REPORTS
    assert [V.report_partition(part) for part in V.PARTS] == list(V.PARTS)


def test_the_prompt_explains_every_outcome_action_and_reason_code(bench):
    text = system_prompt(bench.system("marta"), {})
    workflow = text[text.index("## Workflow"):text.index("## Reason Code Semantics")]
    assert all(word in workflow for word in (*V.OUTCOMES, *V.ACTIONS, V.SUBMIT_TOOL))
    reasons = text[text.index("## Reason Code Semantics"):text.index("## Advisory Banners")]
    assert tuple(line[3:line.index("`", 3)] for line in reasons.splitlines() if line.startswith("- `")) \
        == V.REASON_CODES
    banners = text[text.index("## Advisory Banners"):text.index("## Rules")]
    assert {line[3:line.index("`", 3)] for line in banners.splitlines() if line.startswith("- `")} \
        == set(V.BANNER_SEVERITIES)


def test_the_scope_rubric_names_the_scope_tools_and_no_other():
    named = {tool for tool in V.TOOLS if tool in R._SCOPE}
    assert named == set(V.SCOPE_TOOLS)
    assert ", ".join(V.SCOPE_TOOLS) + ". It cannot call a taxi" in R._SCOPE


# Digests taken at d56538e, before the vocabulary existed: the model must be shown the same bytes.
def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: The tool schemas, changed on purpose for issue 49: the reference's structure (no ``required`` on
#: line_info and disruption_feed, ``default: 0`` on the riders, a description where it has one).
TOOLS_DIGEST = "8a2d9929d3d43b86"
PROMPT_DIGESTS = {
    "MARTA-B-001": ("marta", "a6b51fe2fd298629", "9104eaa716886734"),
    "BART-C-001": ("bart", "6d512e0141cea6f2", "682c6bd73f94bfc8"),
    "CTA-D-001": ("cta", "203d6e935c36ecb0", "28fe2cdec20824a3"),
    "DOHA-F-001": ("doha", "c7bf630f0cebbadd", "7783d809fb0fa554"),
    "TRTC-G-001": ("taipei", "249516b2f45760e8", "8c59baf93270f6e7"),
    "BJM-I-001": ("beijing", "0004b1ebf6ed4904", "82bcdbf18128f28b"),
    "BJM-K-001": ("beijing", "0353a66b527cf545", "75f089ac6d42dfcf"),
    "CTA-K-005": ("cta", "1dc243d690199adb", "47327da1acebbc0e"),
}
RUBRICS_DIGEST = "08ab7e1aa248d0ff"


def test_the_tool_schemas_are_byte_identical_to_before():
    assert _h(json.dumps(TOOLS)) == TOOLS_DIGEST


@pytest.mark.parametrize("case_id", sorted(PROMPT_DIGESTS))
def test_system_prompt_and_user_turns_are_byte_identical_to_before(bench, case_id):
    case = bench.case(case_id)
    text = system_prompt(bench.system(case.system), case.raw.get("system_context", {}))
    assert (case.system, _h(text), _h(json.dumps(user_turns(case.raw)))) == PROMPT_DIGESTS[case_id]


def test_the_rubric_texts_are_byte_identical_to_before():
    texts = [R.JUDGE_SYSTEM, R._ADVISORY, R._POLICY, R._TEMPORAL, R._SAFETY, R._SCOPE, R._FABRICATION]
    assert _h("\n".join(texts)) == RUBRICS_DIGEST
