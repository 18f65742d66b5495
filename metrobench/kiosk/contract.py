"""The render contract: the terminal kiosk state a model submits, and how it is checked.

``submit_assistant_state`` is parsed with these models exactly as the reference's
FastAPI endpoint parses it (unknown fields ignored, pydantic's lax coercion, so
``"1"`` is accepted for ``transfers``), then checked in a fixed order, each
failure a 422 with a plain-string detail (reference spec §5.9):

1. ``outcome`` in :data:`~metrobench.vocabulary.OUTCOMES`    -> ``Invalid outcome: <x>``
2. ``kiosk_action.action`` in :data:`~metrobench.vocabulary.ACTIONS` -> ``Invalid action: <x>``
3. ``kiosk_action.reason_code`` in :data:`~metrobench.vocabulary.REASON_CODES`
   -> ``Invalid reason_code: <x>``
4. a route for ``route_and_fare_ready`` / ``advisory_only``
5. a fare quote for ``route_and_fare_ready``
6. every ``route.stops`` entry a known station id of the case's system

The field order of :class:`TerminalState` matters: the accepted submission's
``response_id`` hashes its JSON dump, and matches the reference's only if the
dump is identical.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container
from typing import Any, Optional

from pydantic import BaseModel, Field

from metrobench.vocabulary import ACTIONS, OUTCOMES, OUTCOMES_NEEDING_ROUTE, REASON_CODES


class RouteInfo(BaseModel):
    origin: str
    destination: str
    stops: list
    transfers: int
    estimated_minutes: float
    distance_miles: float
    line_sequence: list[str]


class AdvisoryBanner(BaseModel):
    severity: str
    title: str
    body: str


class FareQuoteInfo(BaseModel):
    passenger_summary: Optional[dict] = None
    line_items: list[dict] = Field(default_factory=list)
    discounts: list[dict] = Field(default_factory=list)
    total: float
    currency: str


class KioskAction(BaseModel):
    """What the kiosk does next and why (checked against the vocabulary after parsing, spec §5.9)."""

    action: str = Field(description="one of vocabulary.ACTIONS, e.g. prompt_purchase")
    reason_code: str = Field(description="one of vocabulary.REASON_CODES, e.g. ok")


class TerminalState(BaseModel):
    """The body of ``submit_assistant_state`` (``case_id`` is injected by the harness)."""

    outcome: str
    route: Optional[RouteInfo] = None
    fare_quote: Optional[FareQuoteInfo] = None
    kiosk_action: KioskAction
    advisory_banners: list[AdvisoryBanner] = Field(default_factory=list)
    assistant_message: str
    reasoning: str = ""
    case_id: Optional[str] = None


class ContractViolation(Exception):
    """A submission that parses but breaks the contract (422 with a string detail)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class StopNotHashable(TypeError):
    """A stop the reference's membership test crashes on (it answered HTTP 500)."""


def check_terminal_state(state: TerminalState, station_ids: Container[str]) -> None:
    """Apply the contract's checks in the reference's order; raise on the first failure."""
    if state.outcome not in OUTCOMES:
        raise ContractViolation(f"Invalid outcome: {state.outcome}")
    if state.kiosk_action.action not in ACTIONS:
        raise ContractViolation(f"Invalid action: {state.kiosk_action.action}")
    if state.kiosk_action.reason_code not in REASON_CODES:
        raise ContractViolation(f"Invalid reason_code: {state.kiosk_action.reason_code}")
    if state.outcome in OUTCOMES_NEEDING_ROUTE and state.route is None:
        raise ContractViolation(f"route required when outcome={state.outcome}")
    if state.outcome == "route_and_fare_ready" and state.fare_quote is None:
        raise ContractViolation("fare_quote required when outcome=route_and_fare_ready")
    if state.route and state.route.stops:
        ids = [stop.get("station_id", stop) if isinstance(stop, dict) else stop
               for stop in state.route.stops]
        invalid = []
        for sid in ids:
            try:
                known = sid in station_ids
            except TypeError as exc:  # a dict stop without station_id, or a list
                raise StopNotHashable(str(exc)) from exc
            if not known:
                invalid.append(sid)
        if invalid:
            raise ContractViolation(
                f"Unknown station IDs in route.stops: {invalid[:5]}. "
                "Use station_id values from route_planner (e.g. MARTA-AP).")


def response_id(state: TerminalState) -> str:
    """Id of an accepted submission: first 12 hex digits of SHA-256 of its JSON dump."""
    return hashlib.sha256(state.model_dump_json().encode()).hexdigest()[:12]


def accepted_body(state: TerminalState) -> dict[str, Any]:
    return {"accepted": True, "response_id": response_id(state)}
