"""The golden per-case x component scores: what the scorer gives every case, for several answers.

``tests/data/golden_scores.parquet`` holds one row per (variant, case, component)
for all 955 cases and six answers to each, scored by the current scorer (which
equals the reference scorer case for case, docs/scoring.md "Fidelity"), with a fake
judge whose verdict is a digest of the judge prompt, so the judged components,
their pre-checks and their scales are pinned too. ``test_golden.py`` rebuilds
the table and compares it exactly: any change to a component's arithmetic, a
check's order, a reason, a tool's answer the rule agent reads, or the judge
prompts shows up as named rows.

The answers (variants):

* ``rule-agent`` — the scripted baseline's run (real tool calls);
* ``ground-truth`` — the answer built from the ground truth (route, fare, the
  advisory, the issue stations, the cultural words), with the tools the scorer
  expects for the category;
* ``partial-tools`` — the same answer with only one of the expected tools (two
  unrestricted re-plans where a disruption needs a re-route, a route plan where
  there is no service, two submissions without a re-plan in multi-turn cases);
* ``mentions`` — no route and no fare, only words: the disruption keywords, the
  first of the accessibility issue stations, half the cultural keywords, a
  wrong card term, a banner of the wrong severity, the wrong kiosk action;
* ``near-miss`` — numbers at or just past each tolerance, one line item and one
  passenger off;
* ``odd`` — one of seven malformed answers per case (no JSON, strings for
  numbers, lists for objects, unnamed and invented tools, a half state,
  nothing at all).

Regenerate only on purpose — after a deliberate change of scoring behaviour or
of the benchmark data, never to make a failing test pass::

    python tests/golden_scores.py            # rewrites tests/data/golden_scores.parquet
"""

from __future__ import annotations

import copy
import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from metrobench.data import SYSTEMS, Benchmark
from metrobench.data.partition import load_split
from metrobench.agents.rule_agent import run_case
from metrobench.scoring.judge import Judge
from metrobench.scoring.scorer import Scorer
from metrobench.scoring.store import to_table
from metrobench.transcripts.records import CaseRecord
from scoring_helpers import accepted_submit, call, gt_answer

GOLDEN = Path(__file__).resolve().parent / "data" / "golden_scores.parquet"
VARIANTS = ("rule-agent", "ground-truth", "partial-tools", "mentions", "near-miss", "odd")
COLUMNS = ("variant", "case_id", "component", "tier", "score", "max", "judged", "reason", "partition")

Answer = tuple[Any, list[dict[str, Any]], str]  # (response, tool calls, raw content)


class DigestBackend:
    """A judge that needs no network: its verdict (0, 1 or 2) is a digest of the prompt."""

    model = "golden-digest"

    def complete(self, system: str, prompt: str) -> str:
        verdict = hashlib.sha256(f"{system}\n{prompt}".encode()).digest()[0] % 3
        return f"Score: {verdict} | digest {verdict}"


def _needs_reroute(gt: dict[str, Any]) -> bool:
    post = gt.get("post_disruption") or {}
    return post.get("alternative_route") is not None and not post.get("route_still_valid", True)


def _restricted_planner(gt: dict[str, Any]) -> dict[str, Any]:
    post = gt.get("post_disruption") or {}
    return call("route_planner", {"station_restrictions": post.get("expected_restrictions") or [],
                                  "segment_closures": post.get("expected_segment_closures") or [],
                                  "line_closures": post.get("expected_line_closures") or []})


def _expected_tools(case: dict[str, Any]) -> list[str]:
    """The planning tools the scorer expects for the case's category, in a fixed order."""
    gt, category = case["ground_truth"], case["category"]
    context = case.get("system_context", {})
    if category in ("H", "J"):
        return sorted(gt.get("acceptable_tools") or [])
    if category == "I" and not gt.get("temporal", {}).get("service_available", True):
        return []
    tools = ["route_planner"]
    if category in ("B", "F", "G", "I") or (category == "C" and _needs_reroute(gt)) \
            or (category == "K" and "fare_correct" in case.get("scoring", {})):
        tools.append("fare_calculator")
    if category == "C" or (category == "K" and context.get("active_disruptions")):
        tools.append("disruption_feed")
    if category == "D" or (category == "K" and context.get("accessibility_mode")):
        tools.append("station_info")
    return tools


def _tool_call(name: str) -> dict[str, Any]:
    return call(name, {"query_type": "accessibility"} if name == "station_info" else {})


def ideal_calls(case: dict[str, Any]) -> list[dict[str, Any]]:
    calls = [_tool_call(name) for name in _expected_tools(case)]
    if case["category"] == "C" and _needs_reroute(case["ground_truth"]):
        calls.append(_restricted_planner(case["ground_truth"]))
    if case["category"] == "G":  # plan and submit once per turn
        turns = max(1, len(case.get("multi_turn_events") or []))
        return [*(calls + [accepted_submit()]) * turns]
    return calls + [accepted_submit()]


def partial_calls(case: dict[str, Any]) -> list[dict[str, Any]]:
    expected = _expected_tools(case)
    calls = [call(expected[0], {"query_type": "facilities"})] if expected else [call("line_info")]
    if case["category"] == "C" and _needs_reroute(case["ground_truth"]):
        calls = [call("route_planner"), call("route_planner")]
    if case["category"] == "I" and not expected:  # planned although there is no service
        calls = [call("route_planner")]
    if case["category"] == "G":  # submitted twice without re-planning in between
        calls.append(accepted_submit())
    return calls + [accepted_submit()]


def full_answer(bench: Benchmark, case: dict[str, Any]) -> dict[str, Any]:
    """The ground-truth answer, with the advisory, the issue stations and the cultural words."""
    gt = case["ground_truth"]
    answer = gt_answer(bench, case["id"])
    post = gt.get("post_disruption") or {}
    ui = answer["ui_updates"]
    if post.get("advisory_required") or post.get("advisory_must_mention"):
        ui["advisory_banners"] = [{"severity": post.get("advisory_severity", "warning"),
                                   "title": "Disruption",
                                   "body": " ".join(map(str, post.get("advisory_must_mention", [])))}]
    issues = [i["station_name"] for i in (gt.get("accessibility") or {}).get("issues_on_route") or []]
    cultural = list((gt.get("cultural_response") or {}).get("must_mention") or [])
    if issues or cultural:
        ui["assistant_message"] += " " + " ".join(map(str, [*issues, *cultural]))
    return answer


def mentions_answer(bench: Benchmark, case: dict[str, Any]) -> Answer:
    gt = case["ground_truth"]
    answer = gt_answer(bench, case["id"])
    post = gt.get("post_disruption") or {}
    issues = [i["station_name"] for i in (gt.get("accessibility") or {}).get("issues_on_route") or []]
    cultural = list((gt.get("cultural_response") or {}).get("must_mention") or [])
    words = [*post.get("advisory_must_mention", []), *issues[:1], *cultural[:len(cultural) // 2 or 1]]
    ui = answer["ui_updates"]
    ui.pop("route", None), ui.pop("fare_quote", None)
    ui["assistant_message"] = f"Note: {', '.join(map(str, words))}. Use your Oyster card."
    severity = "info" if post.get("advisory_severity", "warning") != "info" else "warning"
    ui["advisory_banners"] = [{"severity": severity, "title": "Service note", "body": "elevator out"}]
    other = [o for o in gt.get("admissible_outcomes") or [] if o != gt["expected_outcome"]]
    answer["outcome"] = other[0] if other else gt["expected_outcome"]
    answer["kiosk_action"]["action"] = "none"
    return answer, [accepted_submit()], ""


def near_miss_answer(bench: Benchmark, case: dict[str, Any]) -> Answer:
    answer = gt_answer(bench, case["id"])
    ui, tolerances = answer["ui_updates"], case.get("tolerances", {})
    if "route" in ui:
        route = ui["route"]
        route["transfers"] += 1
        route["distance_miles"] += tolerances.get("distance_miles", 2.0)
        route["line_sequence"] = list(reversed(route["line_sequence"]))
    quote = ui.get("fare_quote")
    if quote:
        quote["total"] = quote["total"] + tolerances.get("fare", tolerances.get("fare_usd", 0.50))
        items = quote.get("line_items") or []
        if items:
            items[0]["unit_fare"] = items[0].get("unit_fare", 0) + tolerances.get("fare", 0.50)
            del items[1:2]
        summary = quote.get("passenger_summary") or {}
        for key, value in summary.items():
            if value:
                summary[key] = value + 1
                break
    return answer, ideal_calls(case)[:-2] + [accepted_submit()], ""


def _odd_strings(answer: dict[str, Any]) -> dict[str, Any]:
    ui = answer["ui_updates"]
    if "route" in ui:
        ui["route"]["transfers"] = str(ui["route"]["transfers"])
        ui["route"]["distance_miles"] = f"{ui['route']['distance_miles']}"
        ui["route"]["line_sequence"] = ui["route"]["line_sequence"][0]
    if ui.get("fare_quote"):
        quote = ui["fare_quote"]
        quote["total"] = f"${quote['total']:,}"
        quote["passenger_summary"] = {k: str(v) for k, v in (quote["passenger_summary"] or {}).items()}
        for item in quote["line_items"]:
            item["unit_fare"] = str(item.get("unit_fare"))
    return answer


def odd_answer(bench: Benchmark, case: dict[str, Any], index: int) -> Answer:
    answer = gt_answer(bench, case["id"])
    calls = ideal_calls(case)
    kind = index % 7
    if kind == 0:
        return None, calls, answer["ui_updates"]["assistant_message"]
    if kind == 1:
        return _odd_strings(answer), calls, ""
    if kind == 2:
        answer["ui_updates"]["advisory_banners"] = ["careful", {"severity": None}, 7]
        answer["ui_updates"]["fare_quote"] = ["not", "a", "quote"]
        answer["kiosk_action"] = "prompt_purchase"
        return answer, calls, ""
    if kind == 3:
        return ["not", "a", "state"], calls, '["not", "a", "state"]'
    if kind == 4:
        odd_calls = [{"name": None}, call("teleport"), call("station_info", "accessibility"), *calls]
        return answer, odd_calls, ""
    if kind == 5:  # two of the four state checks: an outcome and an empty ui_updates
        return {"outcome": answer["outcome"], "ui_updates": {}}, calls[-1:], ""
    return {}, [], ""  # nothing at all: the judged components' empty-answer rules


def answers(bench: Benchmark, case: dict[str, Any], index: int) -> Iterator[tuple[str, Answer]]:
    """The five built answers to one case (the rule agent's run is recorded separately)."""
    yield "ground-truth", (full_answer(bench, case), ideal_calls(case), "")
    yield "partial-tools", (gt_answer(bench, case["id"]), partial_calls(case), "")
    yield "mentions", mentions_answer(bench, case)
    yield "near-miss", near_miss_answer(bench, case)
    yield "odd", odd_answer(bench, case, index)


def _records(bench: Benchmark, system: str) -> dict[str, list[CaseRecord]]:
    records: dict[str, list[CaseRecord]] = {v: [] for v in VARIANTS}
    data = bench.system(system)
    for index, case in enumerate(c.raw for c in bench.cases(system)):
        records["rule-agent"].append(run_case(data, case))
        for variant, (response, calls, raw) in answers(bench, case, index):
            records[variant].append(CaseRecord(case_id=case["id"], model=variant, system=system,
                                               response=copy.deepcopy(response),
                                               tool_calls_made=calls, raw_content=raw))
    return records


def build(bench: Benchmark, systems: tuple[str, ...] = tuple(SYSTEMS)) -> pa.Table:
    """Score every variant of every case of ``systems``; rows sorted by variant, case, component."""
    split = load_split(bench, None)
    judge = Judge(DigestBackend(), concurrency=1)
    tables = []
    for system in systems:
        cases = [c.raw for c in bench.cases(system)]
        scorer = Scorer(bench.system(system), judge=judge)
        for variant, records in _records(bench, system).items():
            table = to_table(scorer.score(cases, records, model=variant, warn=_fail), split)
            tables.append(table.append_column("variant", pa.array([variant] * len(table))))
    table = pa.concat_tables(tables).select(list(COLUMNS))
    return table.sort_by([("variant", "ascending"), ("case_id", "ascending"), ("component", "ascending")])


def _fail(message: str) -> None:
    raise AssertionError(f"golden answers: {message}")


def write(bench: Benchmark, path: Path = GOLDEN) -> pa.Table:
    table = build(bench)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", compression_level=19, use_dictionary=True)
    return table


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import data_root

    table = write(Benchmark(data_root()))
    print(f"{GOLDEN}: {table.num_rows} rows, {GOLDEN.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

