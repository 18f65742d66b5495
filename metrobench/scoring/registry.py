"""The 22 scoring components, each declared once: name, tier, default maximum and function.

A component is a function of one :class:`~metrobench.scoring.components.CaseView`
decorated with :func:`component` where it is written: the sixteen computed ones
in :mod:`metrobench.scoring.components`, the six judged ones in
:mod:`metrobench.scoring.rubrics`. A computed component returns ``(raw score,
reason)``; a judged one returns that too when no judge is needed, else a
:class:`~metrobench.scoring.rubrics.JudgeTask`. The scorer clamps to the case's
maximum.

What a component is declared with is all the scorer needs (spec §7.2): its tier
(a fixed map in the reference; ``framebook_conformance`` and
``accessibility_accuracy`` are Tier 2 although computed, ``cultural_accuracy``
Tier 1), and ``max_points`` for the four components scored in every case with
that maximum where the case's ``scoring`` dict is silent (every other component
is scored only where the dict names it). The one fact not declared with each
component is :data:`BREAKDOWN_ORDER`, the order in which the reference adds
them to a case: sums run in it, so the float rounding matches the reference's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The order the reference adds components to a case's breakdown (totals are summed in it).
BREAKDOWN_ORDER: tuple[str, ...] = (
    "route_correct", "fare_correct", "tool_calls_correct", "no_tool_hallucination",
    "renderable_state_validity", "outcome_correct", "purchase_gate_correct",
    "fare_breakdown_correct", "passenger_summary_correct", "framebook_conformance",
    "disruption_detected", "advisory_issued", "advisory_content_correct",
    "accessibility_accuracy", "policy_acknowledged", "cultural_accuracy",
    "context_update_detected", "re_planning_efficiency", "safety_response_quality",
    "no_data_fabrication", "temporal_accuracy", "scope_adherence",
)
#: The modules whose decorated functions are the components.
_MODULES = ("metrobench.scoring.components", "metrobench.scoring.rubrics")


@dataclass(frozen=True)
class ComponentSpec:
    """One component as declared."""

    name: str
    tier: int
    max_points: float | None  # scored in every case, with this maximum where the case is silent
    judged: bool
    function: Callable[[Any], Any]


_REGISTRY: dict[str, ComponentSpec] = {}
_ORDERED: list[ComponentSpec] = []  # filled, checked, on the first call of components()


def component(name: str, *, tier: int, max_points: float | None = None,
              judged: bool = False) -> Callable[[Callable], Callable]:
    """Register the decorated function as component ``name`` (the function is returned unchanged)."""
    if tier not in (1, 2):
        raise ValueError(f"component {name}: tier must be 1 or 2, not {tier!r}")

    def register(function: Callable) -> Callable:
        if name in _REGISTRY or _ORDERED:
            raise ValueError(f"component {name} is declared twice, or after the registry was read")
        _REGISTRY[name] = ComponentSpec(name, tier, max_points, judged, function)
        return function

    return register


def components() -> tuple[ComponentSpec, ...]:
    """Every component, in :data:`BREAKDOWN_ORDER`; fails if the declarations and the order disagree."""
    if not _ORDERED:
        for module in _MODULES:
            importlib.import_module(module)
        declared, ordered = set(_REGISTRY), set(BREAKDOWN_ORDER)
        if declared != ordered or len(ordered) != len(BREAKDOWN_ORDER):
            raise RuntimeError(f"components declared but not in BREAKDOWN_ORDER: {sorted(declared - ordered)}; "
                               f"in BREAKDOWN_ORDER but not declared: {sorted(ordered - declared)}")
        _ORDERED.extend(_REGISTRY[name] for name in BREAKDOWN_ORDER)
    return tuple(_ORDERED)


def spec(name: str) -> ComponentSpec:
    """The declaration of component ``name`` (KeyError for a name that is none)."""
    components()
    return _REGISTRY[name]
