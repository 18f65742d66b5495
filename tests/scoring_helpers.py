"""Building answers to real cases and scoring them, for the scoring tests."""

from __future__ import annotations

import copy
from typing import Any

from metrobench.data import Benchmark
from metrobench.data.root import SYSTEM_BY_PREFIX
from metrobench.scoring.scorer import CaseScore, Scorer
from metrobench.transcripts.records import CaseRecord


def call(name: str, arguments: dict | None = None, result: Any = None, error: str | None = None) -> dict:
    return {"name": name, "arguments": arguments or {}, "result": result, "error": error}


def accepted_submit() -> dict:
    return call("submit_assistant_state", {}, {"accepted": True})


def gt_answer(bench: Benchmark, case_id: str) -> dict[str, Any]:
    """The answer a perfect agent gives to a routing/fare case, built from its ground truth."""
    case = bench.case(case_id).raw
    system = bench.system(SYSTEM_BY_PREFIX[case_id.split("-")[0]])
    gt = case["ground_truth"]
    ui: dict[str, Any] = {"advisory_banners": []}
    if gt.get("route"):
        r = gt["route"]
        ui["route"] = {"origin": r["path"][0], "destination": r["path"][-1],
                       "stops": [{"station_id": s} for s in r["path"]], "transfers": r["transfers"],
                       "estimated_minutes": int(r["estimated_minutes"]),
                       "distance_miles": r["distance_miles"], "line_sequence": r["line_sequence"]}
    if gt.get("fare"):
        breakdown = gt.get("expected_fare_breakdown") or {}
        ui["fare_quote"] = {"passenger_summary": copy.deepcopy(breakdown.get("passenger_summary")),
                            "line_items": copy.deepcopy(breakdown.get("line_items", [])),
                            "discounts": [], "total": gt["fare"]["total"],
                            "currency": gt["fare"]["currency"]}
    symbol = system.framebook.currency_symbol
    card = system.framebook.terminology.smartcard
    total = gt["fare"]["total"] if gt.get("fare") else 0
    ui["assistant_message"] = f"Your fare is {symbol}{total}; tap your {card} at the gate."
    return {"outcome": gt["expected_outcome"],
            "kiosk_action": {"action": gt["expected_kiosk_action"],
                             "reason_code": gt["expected_reason_code"]},
            "reasoning": "", "ui_updates": ui}


def score(bench: Benchmark, case_id: str, response: Any = None, calls: list | None = None, *,
          raw_content: str = "", errata: frozenset[str] = frozenset(), judge=None) -> CaseScore:
    system = SYSTEM_BY_PREFIX[case_id.split("-")[0]]
    record = CaseRecord(case_id=case_id, response=response,
                        tool_calls_made=calls if calls is not None else [], raw_content=raw_content)
    scorer = Scorer(bench.system(system), errata=errata, judge=judge)
    [result] = scorer.score([bench.case(case_id).raw], [record])
    return result


def by_name(result: CaseScore) -> dict[str, tuple[float | None, float]]:
    return {c.component: (c.score, c.max) for c in result.components}


def totals(result: CaseScore, fill: str = "zero"):
    return result.totals(fill=fill)


PLAN_CALLS = [call("route_planner"), call("fare_calculator"), accepted_submit()]
