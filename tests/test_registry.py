"""The component registry: each of the 22 components declared once, with the tier and default of spec §7.2."""

from __future__ import annotations

import pytest

from metrobench.scoring import components as C
from metrobench.scoring import rubrics as R
from metrobench.scoring.registry import BREAKDOWN_ORDER, component, components, spec
from metrobench.scoring.scorer import ComponentScore, applicable

TIER2 = {"framebook_conformance", "advisory_content_correct", "policy_acknowledged", "temporal_accuracy",
         "safety_response_quality", "no_data_fabrication", "accessibility_accuracy", "scope_adherence"}
JUDGED = {"advisory_content_correct", "policy_acknowledged", "temporal_accuracy",
          "safety_response_quality", "no_data_fabrication", "scope_adherence"}


def test_every_component_is_declared_once_in_breakdown_order():
    declared = components()
    assert tuple(c.name for c in declared) == BREAKDOWN_ORDER and len(declared) == 22
    assert {c.name for c in declared if c.tier == 2} == TIER2
    assert {c.name for c in declared if c.judged} == JUDGED
    assert {c.name: c.max_points for c in declared if c.max_points is not None} == {
        "tool_calls_correct": 10, "no_tool_hallucination": 10, "renderable_state_validity": 5,
        "framebook_conformance": 5}
    for c in declared:
        module = R if c.judged else C
        assert getattr(module, c.name) is c.function


def test_tiers_of_scores_come_from_the_declarations():
    assert ComponentScore("cultural_accuracy", 1, 10, "").tier == 1
    assert ComponentScore("accessibility_accuracy", 1, 10, "").tier == 2
    with pytest.raises(KeyError):
        spec("route_plausible")


def test_a_case_gets_its_scoring_dict_and_the_declared_defaults():
    scoring = {"scope_adherence": 5, "fare_correct": 15, "no_tool_hallucination": 25}
    assert applicable({"scoring": scoring}) == [
        ("fare_correct", 15), ("tool_calls_correct", 10), ("no_tool_hallucination", 25),
        ("renderable_state_validity", 5), ("framebook_conformance", 5), ("scope_adherence", 5)]


def test_a_second_declaration_of_a_name_is_refused():
    with pytest.raises(ValueError, match="route_correct is declared twice"):
        component("route_correct", tier=1)(lambda view: (0, ""))
    with pytest.raises(ValueError, match="tier must be 1 or 2"):
        component("new_component", tier=3)
