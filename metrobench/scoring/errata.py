"""Named, opt-in corrections of the reference scorer's known defects (spec §13 #1-#6).

By default none is applied and every score equals the reference's. Each erratum
fixes one defect and changes nothing else, so a table can show how each one
moves the headline numbers (``metrobench score --errata beijing-currency,...``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from metrobench.errors import MetrobenchError

BEIJING_CURRENCY = "beijing-currency"
CULTURAL_TERMS = "cultural-terms"
UNATTAINABLE_REASON = "unattainable-reason"
WEATHER_SUSPENSION = "weather-suspension"
PROMPT_CONFLICTS = "prompt-conflicts"
ADVISORY_FARE = "advisory-fare"

#: Erratum name -> the defect it corrects (spec §13 numbering).
ERRATA: dict[str, str] = {
    BEIJING_CURRENCY: "#1 framebook_conformance looks for the currency symbol in ASCII-escaped "
                      "JSON, so Beijing's ¥ never matches; the erratum searches the unescaped text",
    CULTURAL_TERMS: "#2 framebook_conformance subtracts a point for 'suica'/'octopus' even where "
                    "the case's cultural check requires the word (TRTC-E-006/007); the erratum "
                    "exempts required words",
    UNATTAINABLE_REASON: "#3 MARTA-D-016 expects reason code no_accessible_alternative, which "
                         "the contract rejects; the erratum accepts accessibility_issue instead",
    WEATHER_SUSPENSION: "#4 in MARTA/DOHA/TRTC-C-014 the GT outcome advisory_only requires a route "
                        "but the scorer zeroes any route during a full suspension; the erratum "
                        "accepts the contract-required route with advisory_only, and "
                        "service_unavailable as an outcome",
    PROMPT_CONFLICTS: "#5 the prompt asks for service_unavailable/block_purchase when a disruption "
                      "leaves no usable route and policy_exception for fare-changing policies, "
                      "while GT expects advisory_only/display_info/ok and ok; the erratum accepts "
                      "both",
    ADVISORY_FARE: "#6 advisory_only answers lose fare_correct for omitting a fare the GT still "
                   "holds; the erratum gives full fare marks to an advisory_only answer without "
                   "a fare quote where advisory_only is the expected outcome",
}


def parse_errata(spec: str | Iterable[str] | None) -> frozenset[str]:
    """Erratum names from ``"a,b"`` or a list; ``"all"`` selects every one; unknown names fail."""
    if spec is None:
        return frozenset()
    names = [n.strip() for n in (spec.split(",") if isinstance(spec, str) else spec)]
    names = [n for n in names if n and n != "none"]
    if "all" in names:
        return frozenset(ERRATA)
    unknown = sorted(set(names) - set(ERRATA))
    if unknown:
        raise MetrobenchError(f"unknown erratum {', '.join(unknown)}; known: {', '.join(ERRATA)}")
    return frozenset(names)


def is_unusable_route_case(case: dict[str, Any]) -> bool:
    """A disruption case whose route is affected with no alternative (GT: advisory_only, ok)."""
    gt = case.get("ground_truth", {})
    post = gt.get("post_disruption") or {}
    return (case.get("category") == "C" and gt.get("expected_outcome") == "advisory_only"
            and post.get("route_still_valid") is False and post.get("alternative_route") is None)
