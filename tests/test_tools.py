"""The tools: every 404/422/500 path with the reference's exact bodies, and concurrency."""

from __future__ import annotations

import threading

import pytest

from metrobench.kiosk.contract import TerminalState, response_id
from metrobench.kiosk.tools.dispatch import call_tool
from metrobench.kiosk.tools.session import ToolSession
from metrobench.kiosk.tools.functions import route_id_for
from metrobench.kiosk.tools.schemas import VALID_QUERY_TYPES


@pytest.fixture
def marta(bench):
    return ToolSession(bench.system("marta"))


def _text(session, name, args):
    answer = call_tool(session, name, args)
    return answer.status, answer.text


def test_route_planner_ids_and_404s(marta, bench):
    answer = call_tool(marta, "route_planner", {"origin": "Airport", "destination": "Five Points"})
    assert answer.status == 200
    assert answer.body["route_id"] == route_id_for("Airport", "Five Points") == "route_0270621855ef"
    assert isinstance(answer.body["estimated_minutes"], float)
    assert _text(marta, "route_planner", {"origin": "Nowhere", "destination": "Airport"}) == (
        404, '{"detail":"Unknown station: \'Nowhere\'"}')
    assert _text(marta, "route_planner", {"origin": "Airport", "destination": "Five Points",
                                          "station_restrictions": [{"station": "College Park", "restriction": "closed"}]}) == (
        404, '{"detail":"No path between \'Airport\' and \'Five Points\' with current restrictions"}')
    assert _text(marta, "route_planner", {"origin": "Airport", "destination": "Five Points",
                                          "line_closures": [{"line": "Red Line", "from_station": "Airport"}]}) == (
        404, '{"detail":"Partial closure on line \'red\' requires both from_station and to_station"}')
    assert _text(marta, "route_planner", {"origin": "Airport", "destination": "Five Points",
                                          "segment_closures": [["MARTA-AP"]]}) == (500, "Internal Server Error")
    status, text = _text(marta, "route_planner", {"destination": "Five Points"})
    assert status == 422 and '"loc":["body","origin"]' in text and '"msg":"Field required"' in text


def test_fare_calculator_shapes(marta, bench):
    rid = call_tool(marta, "route_planner", {"origin": "Airport", "destination": "Five Points"}).body["route_id"]
    answer = call_tool(marta, "fare_calculator", {"route_id": rid, "passengers": {"adults": 1}})
    assert answer.body["total"] == 2.5 and answer.body["fare_id"].startswith("fare_")
    assert _text(marta, "fare_calculator", {"route_id": rid, "passengers": {"adults": -1}}) == (
        422, '{"detail":[{"type":"greater_than_equal","loc":["body","passengers","adults"],"msg":'
             '"Input should be greater than or equal to 0","input":-1,"ctx":{"ge":0}}]}')
    status, text = _text(marta, "fare_calculator", {"route_id": rid})
    assert status == 422 and '"loc":["body","passengers"]' in text
    bart = ToolSession(bench.system("bart"))
    assert _text(bart, "fare_calculator", {"route_id": "route_unknown", "passengers": {"adults": 1}}) == (
        422, '{"detail":"route_distance_miles required for distance fare model"}')


def test_station_info_paths(marta):
    assert _text(marta, "station_info", {"query_type": "elevators"}) == (
        422, "{\"detail\":\"Invalid query_type 'elevators'. Must be one of: ['accessibility', "
             "'connections', 'exits', 'facilities', 'real_time_status']\"}")
    assert _text(marta, "station_info", {"query_type": "exits"}) == (
        422, '{"detail":"Provide station_id or station_ids"}')
    assert _text(marta, "station_info", {"station_ids": ["MARTA-AP", "Atlantis"], "query_type": "exits"}) == (
        404, '{"detail":"Station \'Atlantis\' not found"}')
    flat = call_tool(marta, "station_info", {"station_id": "midtown", "query_type": "accessibility"}).body
    assert flat["station_id"] == "midtown" and flat["data"]["accessibility"]["elevator"] is False
    batch = call_tool(marta, "station_info", {"station_ids": ["MARTA-MT"], "query_type": "facilities"}).body
    assert list(batch) == ["results"] and "connections" not in batch["results"][0]["data"]


@pytest.mark.parametrize(("query_type", "data"), [
    # spec §5.5: the subset of the station record each query type returns, key order included
    ("exits", '{"name":"Midtown","type":"underground","zone":"midtown"}'),
    ("connections", '{"name":"Midtown","lines":["gold","red"],"connections":["MARTA-AC","MARTA-NA"]}'),
    ("real_time_status", '{"name":"Midtown","status":"operational","alerts":[]}'),
    ("accessibility", '{"name":"Midtown","accessibility":{"elevator":false,"escalator":true,'
                      '"step_free":true,"tactile_paving":true,"wide_gate":true}}'),
    ("facilities", '{"id":"MARTA-MT","name":"Midtown","lines":["gold","red"],"type":"underground",'
                   '"accessibility":{"elevator":false,"escalator":true,"step_free":true,'
                   '"tactile_paving":true,"wide_gate":true},"zone":"midtown"}'),
], ids=lambda value: value if value in VALID_QUERY_TYPES else "")
def test_station_info_returns_each_query_types_subset_exactly(marta, query_type, data):
    assert _text(marta, "station_info", {"station_id": "MARTA-MT", "query_type": query_type}) == (
        200, f'{{"station_id":"MARTA-MT","data":{data}}}')


def test_line_info_paths(marta, bench):
    assert _text(marta, "line_info", {}) == (422, '{"detail":"Provide line or lines"}')
    assert _text(marta, "line_info", {"line": "Purple"}) == (404, '{"detail":"Unknown line: Purple"}')
    doha = ToolSession(bench.system("doha"))
    assert call_tool(doha, "line_info", {"line": "Red Line"}).status == 404  # only the full name resolves
    red = call_tool(marta, "line_info", {"line": "red line"}).body
    assert red["terminals"] == ["MARTA-NS", "MARTA-AP"] and red["station_count"] == 19
    five_points = next(s for s in red["stations"] if s["station_id"] == "MARTA-FP")
    assert five_points["connections"] == ["blue", "gold", "green"]
    assert list(call_tool(marta, "line_info", {"lines": ["red", "gold"]}).body) == ["results"]


def test_disruption_feed_filters(bench):
    case = bench.case("BART-C-006")
    session = ToolSession.for_case(bench.system("bart"), case)
    feed = call_tool(session, "disruption_feed", {}).body["disruptions"]
    assert [d["id"] for d in feed] == ["pm-transbay-tube"] and feed[0]["valid_until"] is not None
    assert call_tool(session, "disruption_feed", {"severity_filter": "minor"}).body["disruptions"] == []
    assert len(call_tool(session, "disruption_feed", {"station": "BART-WOAK"}).body["disruptions"]) == 1
    assert len(call_tool(session, "disruption_feed", {"line": "red"}).body["disruptions"]) == 1  # no line: kept
    # the session injects the case's current time: an expired disruption disappears
    session.current_time = "2026-03-11T00:00:00"
    assert call_tool(session, "disruption_feed", {}).body["disruptions"] == []
    session.disruptions = [{"id": "x", "line": "red", "type": "t", "severity": "info", "message": "m",
                            "segment": {"stations": ["BART-EMBR"]}}]
    session.set_disruptions(session.disruptions)
    assert call_tool(session, "disruption_feed", {"station": "BART-EMBR"}).body["disruptions"][0]["segment"] == ["BART-EMBR"]
    session.disruptions = [{"id": "broken"}]
    assert call_tool(session, "disruption_feed", {}).status == 500


def test_knowledge_base(marta):
    hit = call_tool(marta, "knowledge_base", {"policy_id": "marta-refund-001"}).body
    assert hit["found"] and hit["results"][0]["policy_id"] == "marta-refund-001"
    assert call_tool(marta, "knowledge_base", {"policy_id": "nope", "query": "refund"}).body == {"results": [], "found": False}
    assert call_tool(marta, "knowledge_base", {}).body == {"results": [], "found": False}
    ranked = call_tool(marta, "knowledge_base", {"query": "refund my breeze card pass"}).body
    assert ranked["found"] and len(ranked["results"]) == 3
    assert ranked["results"][0]["policy_id"].startswith("marta-refund")


_GOOD = {
    "outcome": "route_and_fare_ready",
    "kiosk_action": {"action": "prompt_purchase", "reason_code": "ok"},
    "assistant_message": "Your trip is ready.",
    "route": {"origin": "Airport", "destination": "Five Points", "stops": [{"station_id": "MARTA-AP"}, {"station_id": "MARTA-FP"}],
              "transfers": 0, "estimated_minutes": 17, "distance_miles": 8.79, "line_sequence": ["red"]},
    "fare_quote": {"total": 2.5, "currency": "USD"},
}


@pytest.mark.parametrize("change,expected", [
    ({"outcome": "done"}, "Invalid outcome: done"),
    ({"kiosk_action": {"action": "sell", "reason_code": "ok"}}, "Invalid action: sell"),
    ({"kiosk_action": {"action": "refer_to_staff", "reason_code": "no_accessible_alternative"}},
     "Invalid reason_code: no_accessible_alternative"),
    ({"outcome": "advisory_only", "route": None}, "route required when outcome=advisory_only"),
    ({"fare_quote": None}, "fare_quote required when outcome=route_and_fare_ready"),
    ({"route": {**_GOOD["route"], "stops": ["Airport", "College Park", 7]}},
     "Unknown station IDs in route.stops: ['Airport', 'College Park', 7]. Use station_id values from route_planner (e.g. MARTA-AP)."),
])
def test_submit_contract_violations(marta, change, expected):
    status, text = _text(marta, "submit_assistant_state", {**_GOOD, **change})
    assert status == 422 and text == '{"detail":' + __import__("json").dumps(expected, ensure_ascii=False) + "}"


def test_submit_pydantic_errors_500_and_acceptance(bench):
    session = ToolSession(bench.system("marta"), case_id="MARTA-A-001")
    status, text = _text(session, "submit_assistant_state", {"outcome": "advisory_only"})
    assert status == 422 and text.startswith('{"detail":[{"type":"missing","loc":["body","kiosk_action"]')
    assert '"input":{"outcome":"advisory_only","case_id":"MARTA-A-001"}' in text
    bad_total = {**_GOOD, "fare_quote": {"total": "$2.50", "currency": "USD"}}
    assert _text(session, "submit_assistant_state", bad_total)[1] == (
        '{"detail":[{"type":"float_parsing","loc":["body","fare_quote","total"],"msg":"Input should be a valid '
        'number, unable to parse string as a number","input":"$2.50"}]}')
    no_id = {**_GOOD, "route": {**_GOOD["route"], "stops": [{"station_name": "Airport"}]}}
    assert _text(session, "submit_assistant_state", no_id) == (500, "Internal Server Error")
    lax = {**_GOOD, "route": {**_GOOD["route"], "transfers": "0"}}
    answer = call_tool(session, "submit_assistant_state", lax)
    expected_id = response_id(TerminalState.model_validate({**lax, "case_id": "MARTA-A-001"}))
    assert answer.body == {"accepted": True, "response_id": expected_id}


def test_names_that_are_not_tools(marta):
    assert _text(marta, "book_taxi", {}) == (404, '{"detail":"Not Found"}')
    assert _text(marta, "set_disruptions", {"disruptions": []}) == (404, '{"detail":"Not Found"}')
    assert _text(marta, "health", {}) == (405, '{"detail":"Method Not Allowed"}')


def test_concurrent_cases_keep_their_own_route_cache(bench):
    """Same origin/destination strings in two cases, one re-planned around a closure
    (3.50 becomes 5.00): in the reference the shared per-system cache let one case's
    fare_calculator use the other case's route."""
    system = bench.system("bart")
    errors: list[str] = []
    barrier = threading.Barrier(2)

    def run(case_id: str, restricted: bool) -> None:
        session = ToolSession(system, case_id=case_id)
        for _ in range(200):
            args = {"origin": "12th St Oakland", "destination": "Bay Fair"}
            if restricted:
                args["segment_closures"] = [["BART-12TH", "BART-LAKE"]]
            barrier_wait = barrier.wait if _ == 0 else (lambda: None)
            barrier_wait()
            planned = call_tool(session, "route_planner", args)
            fare = call_tool(session, "fare_calculator",
                             {"route_id": planned.body.get("route_id", "none"), "passengers": {"adults": 1}})
            if planned.status != 200 or fare.body["total"] != (5.0 if restricted else 3.5):
                errors.append(f"{case_id}: {planned.status} {fare.text}")

    threads = [threading.Thread(target=run, args=("BART-A-001", False)),
               threading.Thread(target=run, args=("BART-C-006", True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
