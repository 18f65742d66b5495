"""Request and response models of the six tools (reference spec §5.3–§5.8).

They mirror the reference's FastAPI models field for field, because the models
*are* the behaviour: their defaults, their lax coercion and their error messages
are what a model sees. Responses are dumped in JSON mode, so numbers the
reference declares ``float`` come back as floats (``3.0``, not ``3``).
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, Field, create_model

from metrobench.vocabulary import RIDER_KEYS, STATION_QUERY_TYPES

VALID_QUERY_TYPES = frozenset(STATION_QUERY_TYPES)


class StationRestriction(BaseModel):
    station: str
    restriction: str


class LineClosure(BaseModel):
    line: str
    from_station: Optional[str] = None
    to_station: Optional[str] = None


class RoutePlannerRequest(BaseModel):
    origin: str
    destination: str
    departure_time: Optional[str] = None
    accessibility: Optional[list[str]] = None
    station_restrictions: Optional[list[StationRestriction]] = None
    segment_closures: Optional[list[list[str]]] = None
    line_closures: Optional[list[LineClosure]] = None
    case_id: Optional[str] = None


class StopInfo(BaseModel):
    station_id: str
    station_name: str
    line: Optional[str]
    is_transfer: bool
    transfer_to: Optional[str]


class RoutePlannerResponse(BaseModel):
    route_id: str
    stops: list[StopInfo]
    transfers: int
    estimated_minutes: float
    distance_miles: float
    line_sequence: list[str]


#: One non-negative count per rider key of the vocabulary, 0 when absent.
PassengerCounts = create_model(
    "PassengerCounts", __module__=__name__,
    **{key: (int, Field(default=0, ge=0)) for key in RIDER_KEYS},
)


class FareCalculatorRequest(BaseModel):
    route_id: str
    passengers: PassengerCounts
    ticket_type: str = "single"
    payment_method: str = "breeze_card"  # the reference's default, for every system
    case_id: Optional[str] = None


class Amount(BaseModel):
    label: str
    amount: float
    currency: str


class FareCalculatorResponse(BaseModel):
    fare_id: str
    line_items: list[Amount]
    subtotal: float
    discounts: list[Amount]
    total: float
    currency: str


class StationInfoRequest(BaseModel):
    station_id: Optional[str] = None
    station_ids: Optional[list[str]] = None
    query_type: str
    case_id: Optional[str] = None


class LineInfoRequest(BaseModel):
    line: Optional[str] = None
    lines: Optional[list[str]] = None
    case_id: Optional[str] = None


class LineStationEntry(BaseModel):
    station_id: str
    station_name: str
    position: int
    is_terminus: bool
    connections: list[str]


class LineInfoResponse(BaseModel):
    line_id: str
    line_name: str
    color: str
    station_count: int
    is_loop: bool
    terminals: list[str]
    stations: list[LineStationEntry]


class DisruptionFeedRequest(BaseModel):
    case_id: Optional[str] = None
    current_time: Optional[str] = None
    line: Optional[str] = None
    station: Optional[str] = None
    severity_filter: str = "all"


class DisruptionEntry(BaseModel):
    id: str
    line: Optional[str] = None
    segment: Optional[list[str]] = None
    type: str
    severity: str
    message: str
    alternative: Optional[str] = None
    eta_resolution: Optional[str] = None
    valid_from: Optional[str] = None
    valid_until: Optional[str] = None


class DisruptionFeedResponse(BaseModel):
    disruptions: list[DisruptionEntry]


class KnowledgeBaseRequest(BaseModel):
    policy_id: str = ""
    query: str = ""
    category: str = "general"
    case_id: Optional[str] = None


class KnowledgeBaseResult(BaseModel):
    title: str
    content: str
    policy_id: str


class KnowledgeBaseResponse(BaseModel):
    results: list[KnowledgeBaseResult]
    found: bool
