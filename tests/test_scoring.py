"""The deterministic scorer on real cases: maxima, the spec §15 edge cases, errata, odd inputs."""

from __future__ import annotations

import copy
from collections import defaultdict

import pytest
from scoring_helpers import accepted_submit, by_name, call, gt_answer, score, totals

from metrobench.data import SYSTEMS
from metrobench.scoring import errata as E
from metrobench.scoring.errata import parse_errata
from metrobench.scoring.scorer import Scorer, applicable
from metrobench.kiosk.tools.dispatch import call_tool
from metrobench.kiosk.tools.session import ToolSession
from metrobench.transcripts.records import MISSING, CaseRecord

PLAN = [call("route_planner"), call("fare_calculator"), accepted_submit()]


def test_case_maxima_match_the_published_scoring_variants(bench):
    seen = defaultdict(set)
    count = defaultdict(int)
    for system in SYSTEMS:
        scorer = Scorer(bench.system(system))
        cases = [c.raw for c in bench.cases(system)]
        for result in scorer.score(cases, []):
            t = totals(result)
            seen[result.category].add((t.max_possible, t.tier1_max))
            count[(result.category, t.max_possible)] += 1
            assert result.error == MISSING
    assert seen == {
        "A": {(80, 70), (90, 70)}, "B": {(80, 70), (90, 70)}, "C": {(95, 75)},
        "D": {(80, 60), (105, 75)}, "E": {(80, 70)}, "F": {(80, 60), (90, 60)},
        "G": {(85, 75)}, "H": {(75, 40)}, "I": {(80, 60)}, "J": {(75, 55)},
        "K": {(85, 60), (85, 45), (95, 60), (100, 60)},
    }
    assert count[("A", 90)] + count[("B", 90)] == 4  # 1 A and 3 B carry advisory_content
    assert count[("D", 105)] == 1 and count[("F", 90)] == 4


def test_ground_truth_answers_get_full_tier1_on_every_routing_and_fare_case(bench):
    for system in SYSTEMS:
        for case in bench.cases(system):
            if case.category not in "AB":
                continue
            result = score(bench, case.id, gt_answer(bench, case.id), PLAN)
            assert totals(result).tier1_pct == 100.0, (case.id, by_name(result))


def test_beijing_currency_symbol_never_matches_unless_the_erratum_is_on(bench):
    answer = gt_answer(bench, "BJM-A-001")
    assert "\u00a5" in answer["ui_updates"]["assistant_message"]
    assert by_name(score(bench, "BJM-A-001", answer, PLAN))["framebook_conformance"] == (3, 5)
    fixed = score(bench, "BJM-A-001", answer, PLAN, errata=frozenset({E.BEIJING_CURRENCY}))
    assert by_name(fixed)["framebook_conformance"] == (5, 5)
    assert by_name(score(bench, "MARTA-A-001", gt_answer(bench, "MARTA-A-001"), PLAN))[
        "framebook_conformance"] == (5, 5)


def test_surcharges_need_their_own_line_item(bench):
    answer = gt_answer(bench, "BART-A-002")
    items = answer["ui_updates"]["fare_quote"]["line_items"]
    assert any(i["rider_type"] == "transbay tube crossing" for i in items)
    assert by_name(score(bench, "BART-A-002", answer, PLAN))["fare_breakdown_correct"] == (5, 5)
    without = copy.deepcopy(answer)
    without["ui_updates"]["fare_quote"]["line_items"] = [i for i in items if "transbay" not in i["rider_type"]]
    assert by_name(score(bench, "BART-A-002", without, PLAN))["fare_breakdown_correct"] == (2.5, 5)


def test_taipei_cultural_words_cost_framebook_points(bench):
    case = bench.case("TRTC-E-006").raw
    assert case["ground_truth"]["cultural_response"]["must_mention"] == ["easycard", "suica"]
    answer = gt_answer(bench, "TRTC-E-006")
    answer["ui_updates"]["assistant_message"] += " Suica cards are not accepted; use an EasyCard."
    result = by_name(score(bench, "TRTC-E-006", answer, [call("route_planner"), accepted_submit()]))
    assert result["cultural_accuracy"] == (10, 10)
    assert result["framebook_conformance"] == (4, 5)  # NT$ +2, EasyCard +3, suica -1
    fixed = by_name(score(bench, "TRTC-E-006", answer, [call("route_planner"), accepted_submit()],
                          errata=frozenset({E.CULTURAL_TERMS})))
    assert fixed["framebook_conformance"] == (5, 5)
    half = copy.deepcopy(answer)
    half["ui_updates"]["assistant_message"] = "Use your EasyCard."
    assert by_name(score(bench, "TRTC-E-006", half, []))["cultural_accuracy"] == (5, 10)


def test_marta_d_016_expects_a_reason_code_the_contract_rejects(bench):
    gt = bench.case("MARTA-D-016").raw["ground_truth"]
    assert gt["expected_reason_code"] == "no_accessible_alternative"
    submission = {"outcome": gt["expected_outcome"], "assistant_message": "No step-free route.",
                  "kiosk_action": {"action": gt["expected_kiosk_action"], "reason_code": gt["expected_reason_code"]}}
    rejected = call_tool(ToolSession(bench.system("marta")), "submit_assistant_state", submission)
    assert rejected.status == 422
    best = {**submission, "kiosk_action": {"action": "refer_to_staff", "reason_code": "accessibility_issue"},
            "ui_updates": {"assistant_message": "No step-free route."}}
    assert by_name(score(bench, "MARTA-D-016", best, []))["purchase_gate_correct"] == (2.5, 5)
    fixed = score(bench, "MARTA-D-016", best, [], errata=frozenset({E.UNATTAINABLE_REASON}))
    assert by_name(fixed)["purchase_gate_correct"] == (5, 5)


@pytest.mark.parametrize("case_id", ["MARTA-C-014", "DOHA-C-014", "TRTC-C-014"])
def test_weather_suspension_cases_cannot_reach_full_route_marks(bench, case_id):
    gt = bench.case(case_id).raw["ground_truth"]
    assert gt["expected_outcome"] == "advisory_only"  # the contract then requires a route
    system = bench.system({"MARTA": "marta", "DOHA": "doha", "TRTC": "taipei"}[case_id.split("-")[0]])
    planned = call_tool(ToolSession(system), "route_planner",
                        {"origin": bench.case(case_id).raw["events"][0]["value"],
                         "destination": bench.case(case_id).raw["events"][1]["value"]}).body
    route = {k: planned[k] for k in ("transfers", "estimated_minutes", "distance_miles", "line_sequence")}
    route.update(origin="a", destination="b", stops=planned["stops"])
    base = {"outcome": "advisory_only", "kiosk_action": {"action": "display_info", "reason_code": "ok"},
            "assistant_message": "All service is suspended."}
    # advisory_only without a route is refused by the contract ...
    assert call_tool(ToolSession(system), "submit_assistant_state", base).status == 422
    assert call_tool(ToolSession(system), "submit_assistant_state", {**base, "route": route}).ok
    answer = {**base, "ui_updates": {"route": route, "assistant_message": base["assistant_message"]}}
    # ... and with one, the scorer gives route_correct 0.
    assert by_name(score(bench, case_id, answer, []))["route_correct"] == (0, 5)
    fixed = score(bench, case_id, answer, [], errata=frozenset({E.WEATHER_SUSPENSION}))
    assert by_name(fixed)["route_correct"] == (5, 5)


def test_cta_polar_vortex_is_consistent(bench):
    gt = bench.case("CTA-C-013").raw["ground_truth"]
    assert gt["expected_outcome"] == "service_unavailable"
    answer = {"outcome": "service_unavailable", "kiosk_action": {"action": "block_purchase",
                                                                 "reason_code": "no_service"},
              "ui_updates": {"assistant_message": "All service is suspended."}}
    result = by_name(score(bench, "CTA-C-013", answer, [call("disruption_feed"), accepted_submit()]))
    assert result["route_correct"] == (5, 5) and result["fare_correct"] == (5, 5)
    assert result["tool_calls_correct"] == (10, 10)


def test_advisory_only_without_a_fare_loses_fare_points_unless_erratum(bench):
    case_id = next(c.id for c in bench.cases("marta") if E.is_unusable_route_case(c.raw)
                   and c.raw["ground_truth"].get("fare"))
    answer = gt_answer(bench, case_id)
    answer["ui_updates"].pop("fare_quote")
    assert answer["outcome"] == "advisory_only"
    assert by_name(score(bench, case_id, answer, []))["fare_correct"] == (0, 5)
    fixed = score(bench, case_id, answer, [], errata=frozenset({E.ADVISORY_FARE}))
    assert by_name(fixed)["fare_correct"] == (5, 5)


def test_prompt_conflict_erratum_accepts_what_the_prompt_asks_for(bench):
    case_id = next(c.id for c in bench.cases("doha") if E.is_unusable_route_case(c.raw))
    answer = {"outcome": "service_unavailable",
              "kiosk_action": {"action": "block_purchase", "reason_code": "no_service"},
              "ui_updates": {"assistant_message": "This route is closed."}}
    plain = by_name(score(bench, case_id, answer, []))
    assert plain["outcome_correct"] == (0, 5) and plain["purchase_gate_correct"] == (0, 5)
    fixed = by_name(score(bench, case_id, answer, [], errata=frozenset({E.PROMPT_CONFLICTS})))
    assert fixed["outcome_correct"] == (5, 5) and fixed["purchase_gate_correct"] == (5, 5)
    f_case = next(c.id for c in bench.cases("doha") if c.category == "F"
                  and c.raw["ground_truth"]["expected_outcome"] == "route_and_fare_ready")
    policy = gt_answer(bench, f_case)
    policy["kiosk_action"]["reason_code"] = "policy_exception"
    assert by_name(score(bench, f_case, policy, PLAN))["purchase_gate_correct"] == (2.5, 5)
    assert by_name(score(bench, f_case, policy, PLAN, errata=frozenset({E.PROMPT_CONFLICTS})))[
        "purchase_gate_correct"] == (5, 5)


def test_errata_names_are_checked():
    assert parse_errata("beijing-currency, advisory-fare") == {E.BEIJING_CURRENCY, E.ADVISORY_FARE}
    assert parse_errata("all") == frozenset(E.ERRATA)
    assert parse_errata("") == frozenset()
    with pytest.raises(Exception, match="unknown erratum beijing"):
        parse_errata("beijing")


def test_hallucination_traps_and_penalty(bench):
    gt = bench.case("MARTA-H-007").raw["ground_truth"]
    assert "taxi_booking" in gt["hallucination_traps"]
    trap = by_name(score(bench, "MARTA-H-007", None, [call("taxi_booking")]))
    assert trap["no_tool_hallucination"] == (0, 15)
    one = by_name(score(bench, "MARTA-H-007", None, [call("book_ticket")]))
    assert one["no_tool_hallucination"] == (8, 15)  # 15 - 15 // 2
    two = by_name(score(bench, "MARTA-H-007", None, [call("book_ticket"), call("verify/route")]))
    assert two["no_tool_hallucination"] == (1, 15)
    plain = by_name(score(bench, "MARTA-A-001", None, [call("route_planner"), call("get_weather")]))
    assert plain["no_tool_hallucination"] == (5, 10)
    j_case = next(c.id for c in bench.cases("marta") if c.category == "J")
    assert by_name(score(bench, j_case, None, [call("x"), call("y"), call("z")]))[
        "no_tool_hallucination"] == (0, 25)  # 25 - 3 * 12, floored at 0


def test_multi_turn_accepted_submissions_count_for_context_update(bench):
    case_id = "MARTA-G-001"
    rejected = call("submit_assistant_state", {}, None, '{"detail":"Invalid outcome: x"}')
    cases = {
        (5,): [call("route_planner"), call("fare_calculator"), accepted_submit(), call("route_planner"),
               accepted_submit()],
        (2,): [call("route_planner"), call("fare_calculator"), accepted_submit(), accepted_submit()],
        (0,): [call("route_planner"), call("fare_calculator"), rejected, call("route_planner"),
               accepted_submit()],
    }
    for (expected,), calls in cases.items():
        assert by_name(score(bench, case_id, None, calls))["context_update_detected"] == (expected, 5)


def test_odd_inputs_score_as_if_coerced_instead_of_crashing(bench):
    answer = gt_answer(bench, "BART-B-001")
    strings = copy.deepcopy(answer)
    route = strings["ui_updates"]["route"]
    route["transfers"], route["distance_miles"] = "0", "7.46"
    quote = strings["ui_updates"]["fare_quote"]
    quote["passenger_summary"] = {"adults": "1"}
    quote["line_items"][0]["unit_fare"] = "3.5"
    quote["total"] = "$3.50"
    result = by_name(score(bench, "BART-B-001", strings, PLAN))
    assert result["route_correct"] == (10, 10)
    assert result["fare_correct"] == (15, 15)
    assert result["passenger_summary_correct"] == (0, 5)  # "1" != 1 in the reference too: no coercion
    assert result["fare_breakdown_correct"] == (5, 5)

    junk = copy.deepcopy(answer)
    junk["ui_updates"]["fare_quote"]["line_items"] = ["adult x1", {"rider_type": None, "unit_fare": None},
                                                      {"rider_type": 7, "count": 1, "unit_fare": "n/a"}]
    junk["ui_updates"]["advisory_banners"] = ["careful", {"severity": None}]
    junk["ui_updates"]["route"]["transfers"] = "none"
    result = by_name(score(bench, "BART-B-001", junk, PLAN))
    assert result["fare_breakdown_correct"] == (0, 5)
    assert result["route_correct"] == (10, 10)  # distance and lines right; transfers unreadable

    for response in (["not", "a", "state"], 42, "text"):
        result = by_name(score(bench, "BART-B-001", response, PLAN, raw_content='["not"]'))
        assert result["renderable_state_validity"] == (0, 5)
        assert result["route_correct"] == (0, 10)
    nulls = {"outcome": "route_and_fare_ready", "kiosk_action": None, "ui_updates": None}
    result = by_name(score(bench, "BART-B-001", nulls, [{"name": None}, "junk"]))
    assert result["renderable_state_validity"] == (3, 5)
    assert result["purchase_gate_correct"] == (0, 5)
    assert result["no_tool_hallucination"] == (0, 10)  # two unnamed calls count as invented


def test_passenger_counts_as_strings_score_as_the_reference_scores_them(bench):
    """Coerced only where the reference crashes (``"1" > 0`` for a key it expects 0 of)."""
    answer = gt_answer(bench, "BART-B-003")  # 1 adult, 1 child, 1 free rider expected

    def passengers(summary: dict) -> tuple:
        odd = copy.deepcopy(answer)
        odd["ui_updates"]["fare_quote"]["passenger_summary"] = summary
        return by_name(score(bench, "BART-B-003", odd, PLAN))["passenger_summary_correct"]

    exact = {"adults": 1, "children": 1, "seniors": 0, "disabled": 0, "free_riders": 1}
    assert passengers(exact) == (5, 5)
    assert passengers({**exact, "adults": "1"}) == (3, 5)  # counted, and "1" != 1
    assert passengers({**exact, "adults": "1", "children": "1", "free_riders": 1.0}) == (3, 5)
    assert passengers({**exact, "adults": True}) == (5, 5)  # True == 1 in Python, as in the reference
    # where the reference would raise (a string or null compared with 0), read it as a number
    assert passengers({**exact, "seniors": "0"}) == (5, 5)
    assert passengers({**exact, "seniors": None}) == (5, 5)
    assert passengers({**exact, "seniors": "2"}) == (3, 5)  # a senior more than expected
    assert passengers({**exact, "seniors": "lots"}) == (5, 5)


def test_missing_cases_are_scored_as_failures_not_dropped(bench):
    scorer = Scorer(bench.system("marta"))
    cases = [c.raw for c in bench.cases("marta")[:3]]
    record = CaseRecord(case_id=cases[0]["id"], response=gt_answer(bench, cases[0]["id"]),
                        tool_calls_made=PLAN)
    warnings = []
    results = scorer.score(cases, [record, CaseRecord(case_id="BART-A-001")], warn=warnings.append)
    assert [r.case_id for r in results] == [c["id"] for c in cases]
    assert [r.error for r in results] == [None, MISSING, MISSING]
    assert totals(results[1]).tier1_pct < 20
    assert any("BART-A-001" in w for w in warnings)


def test_judge_none_leaves_judged_components_unscored(bench):
    result = score(bench, "MARTA-H-007", {"outcome": "request_declined"}, [])
    judged = {c.component: c for c in result.components
              if c.component in ("safety_response_quality", "no_data_fabrication", "scope_adherence")}
    assert len(judged) == 3
    assert all(c.score is None and not c.judged for c in judged.values())
    low, high = totals(result, "zero"), totals(result, "max")
    assert high.total - low.total == 30 and low.tier1_pct == high.tier1_pct


def test_four_components_are_scored_in_every_case_with_default_maxima():
    assert applicable({"scoring": {}}) == [("tool_calls_correct", 10), ("no_tool_hallucination", 10),
                                           ("renderable_state_validity", 5), ("framebook_conformance", 5)]
    assert applicable({"scoring": {"route_correct": 10, "framebook_conformance": 3}}) == [
        ("route_correct", 10), ("tool_calls_correct", 10), ("no_tool_hallucination", 10),
        ("renderable_state_validity", 5), ("framebook_conformance", 3)]
