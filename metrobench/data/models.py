"""Pydantic models of the benchmark's files: the six per-system files and the cases.

The models validate what the harness reads and type what it computes with.
Fields that are informational in the reference (generator metadata, optional
ground-truth extras) are kept as extra attributes rather than rejected, so a
model accepts every committed file and still catches the mistakes that would
change a score: a missing field, a wrong type, an unknown event kind.

Numbers that the reference keeps as written (``base_fare: 3`` stays an int and is
printed as ``¥3`` in prompts) are typed ``int | float`` so pydantic's smart union
does not turn them into floats.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model

from metrobench.vocabulary import CATEGORIES, RIDER_KEYS

Number = Union[int, float]


class _Open(BaseModel):
    """Extra keys are kept (informational fields the harness never reads)."""

    model_config = ConfigDict(extra="allow")


# --------------------------------------------------------------------------- stations

class Accessibility(_Open):
    elevator: bool
    escalator: bool
    step_free: bool
    tactile_paving: bool
    wide_gate: bool


class Station(_Open):
    id: str
    name: str
    lines: list[str]
    type: Literal["underground", "elevated", "surface"]
    accessibility: Accessibility
    connections: list[str]
    zone: str


# --------------------------------------------------------------------------- lines and graph

class Branch(_Open):
    name: str
    diverges_at: str
    stations: list[str]


class Line(_Open):
    id: str
    name: str
    color: str
    stations: list[str]
    type: str
    runs_24h: bool = Field(alias="24h")
    typical_headway_min: Number
    branches: list[Branch] = Field(default_factory=list)


class Edge(_Open):
    from_: str = Field(alias="from")
    to: str
    distance_miles: float
    travel_time_min: float
    line: str
    type: str


class Graph(_Open):
    directed: bool
    edges: list[Edge]


# --------------------------------------------------------------------------- fares

class FareBracket(_Open):
    max_miles: Number
    fare: Number


class Surcharge(_Open):
    """One of three shapes: a crossing (two station lists), one station, or several."""

    amount: Number
    description: str | None = None
    replaces_base: bool = False
    sf_side: list[str] | None = None
    east_bay_side: list[str] | None = None
    station: str | None = None
    stations: list[str] | None = None


class Discount(_Open):
    fare: Number | None = None
    multiplier: Number | None = None
    max_per_adult: int | None = None
    qualifier: str | None = None


class StationOverride(_Open):
    fare: Number
    ignores_payment_adjustment: bool = False


class PaymentMethod(_Open):
    fare_adjustment: Number | None = None
    fare: Number | None = None
    class_: str | None = Field(default=None, alias="class")


class FareRules(_Open):
    system: str | None = None
    model: Literal["flat", "distance", "flat_with_exceptions"]
    currency: str = "USD"
    currency_symbol: str
    base_fare: Number
    payment_methods: dict[str, PaymentMethod] = Field(default_factory=dict)
    discounts: dict[str, Discount] = Field(default_factory=dict)
    fare_brackets: list[FareBracket] | None = None
    surcharges: dict[str, Surcharge] | None = None
    station_overrides: dict[str, StationOverride] | None = None
    gold_fare: Number | None = None
    passes: dict[str, Any] | None = None


# --------------------------------------------------------------------------- framebook, policies

class Terminology(_Open):
    smartcard: str
    contactless: str


class Framebook(_Open):
    org_name: str
    full_name: str
    primary_language: str
    secondary_languages: list[str] = Field(default_factory=list)
    currency_symbol: str
    currency_code: str
    fare_display_format: str
    terminology: Terminology
    operating_hours: dict[str, Any]
    cultural_notes: list[str] = Field(default_factory=list)


class FramebookFile(_Open):
    framebook: Framebook


class Policy(_Open):
    policy_id: str
    category: str
    title: str
    content: str
    synonyms: list[str] = Field(default_factory=list)


class PolicyFile(_Open):
    system: str | None = None
    policies: list[Policy]


# --------------------------------------------------------------------------- generator inputs

class EventTemplate(_Open):
    instantiations: list[dict[str, Any]]


class EventsFile(_Open):
    templates: dict[str, EventTemplate]


class Scenario(_Open):
    id: str
    title: str
    origin_id: str
    dest_id: str
    event_ids: list[str]


class Tolerances(_Open):
    fare: Number
    time_minutes: Number
    distance_miles: Number


class TestPairs(_Open):
    tolerances: Tolerances
    id_prefix: str


# --------------------------------------------------------------------------- cases

class Disruption(_Open):
    id: str
    line: str | None = None
    segment: list[str] | None = None
    type: str
    severity: str
    message: str
    alternative: str | None = None
    eta_resolution: str | None = None
    valid_from: str | None = None
    valid_until: str | None = None


class StationSelected(_Open):
    type: Literal["station_selected"]
    field: Literal["origin", "destination"]
    value: str
    station_id: str | None = None


#: A change of the rider counts: one optional count per rider key of the vocabulary.
PassengerCountChanged = create_model(
    "PassengerCountChanged", __base__=_Open, __module__=__name__,
    type=(Literal["passenger_count_changed"], ...),
    **{key: (int | None, None) for key in RIDER_KEYS},
)


class PaymentMethodSelected(_Open):
    type: Literal["payment_method_selected"]
    method: str


class FreetextInput(_Open):
    type: Literal["freetext_input"]
    text: str


class DisruptionUpdate(_Open):
    type: Literal["disruption_update"]
    disruption: Disruption


Event = Annotated[
    Union[StationSelected, PassengerCountChanged, PaymentMethodSelected, FreetextInput,
          DisruptionUpdate],
    Field(discriminator="type"),
]


class TemporalContext(_Open):
    current_time: str
    day_of_week: str | None = None
    notes: str | None = None


class PolicyChange(_Open):
    text: str
    policy_id: str | None = None


class SystemContext(_Open):
    current_time: str
    active_disruptions: list[Disruption]
    framebook: str
    accessibility_mode: bool = False
    policy_change: PolicyChange | None = None
    temporal_context: TemporalContext | None = None
    knowledge_query: bool = False


class RouteTruth(_Open):
    path: list[str]
    line_sequence: list[str]
    transfers: int
    distance_miles: float
    estimated_minutes: float


class FareTruth(_Open):
    total: Number
    currency: str


class GroundTruth(_Open):
    route: RouteTruth | None
    fare: FareTruth | None
    expected_outcome: str
    expected_kiosk_action: str
    expected_reason_code: str


class Case(_Open):
    id: str = Field(pattern=r"^[A-Z]+-[A-K]-\d{3}$")
    system: str
    category: Literal[CATEGORIES]  # type: ignore[valid-type]  # the vocabulary's A-K
    difficulty: Literal["easy", "medium", "hard"]
    interaction_mode: str
    title: str
    events: list[Event]
    multi_turn_events: list[list[Event]] | None = None
    system_context: SystemContext
    ground_truth: GroundTruth
    scoring: dict[str, Number]
    tolerances: Tolerances

    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def raw(self) -> dict[str, Any]:
        """The case exactly as parsed from JSON (the scorer reads optional fields from it)."""
        return self._raw


def case_digest(raw: Mapping[str, Any]) -> str:
    """The digest of a case as parsed from JSON (:attr:`Case.raw`): what every record carries as
    ``meta.case_sha``. Here, below the runner that writes it and the scorer that checks it, so both
    compute it one way (a resume refuses a changed case; the scorer refuses a record run on other case
    data than the data it scores against)."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:16]


def case_hash(case: Case) -> str:
    """:func:`case_digest` of ``case`` (``meta.case_sha`` of its records)."""
    return case_digest(case.raw)
