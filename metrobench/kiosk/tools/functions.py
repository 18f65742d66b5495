"""The six tools and the terminal submit, as plain functions over a :class:`ToolSession`.

Each function takes a validated request model and returns the response body
(a JSON-ready dict), or raises :class:`ToolError` with the HTTP status and
detail the reference server answers with (404 for unknown stations, lines and
unreachable routes; 422 for bad arguments; 500 where the reference crashes).
Behaviour follows reference spec §5.3–§5.9; ids are the same SHA-256 prefixes.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from pydantic import ValidationError

from metrobench.kiosk.contract import (
    ContractViolation,
    StopNotHashable,
    TerminalState,
    accepted_body,
    check_terminal_state,
)
from metrobench.kiosk.fares import FareError
from metrobench.kiosk.network import RoutingError
from metrobench.kiosk.tools.schemas import (
    VALID_QUERY_TYPES,
    DisruptionEntry,
    DisruptionFeedRequest,
    DisruptionFeedResponse,
    FareCalculatorRequest,
    FareCalculatorResponse,
    KnowledgeBaseRequest,
    KnowledgeBaseResponse,
    KnowledgeBaseResult,
    LineInfoRequest,
    LineInfoResponse,
    LineStationEntry,
    RoutePlannerRequest,
    RoutePlannerResponse,
    StationInfoRequest,
    StopInfo,
)
from metrobench.kiosk.tools.session import ToolSession
from metrobench.vocabulary import RIDER_KEYS

INTERNAL_SERVER_ERROR = "Internal Server Error"


class ToolError(Exception):
    """An HTTP error answer: ``detail`` becomes ``{"detail": ...}`` (500s are plain text)."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


def route_id_for(origin: str, destination: str) -> str:
    """``route_`` + 12 hex digits of SHA-256 over the strings *as given* (restrictions excluded)."""
    raw = f"route:{origin.lower()}:{destination.lower()}"
    return "route_" + hashlib.sha256(raw.encode()).hexdigest()[:12]


def fare_id_for(route_id: str, adults: int, children: int, seniors: int, disabled: int,
                ticket_type: str) -> str:
    raw = f"fare:{route_id}:{adults}:{children}:{seniors}:{disabled}:{ticket_type}"
    return "fare_" + hashlib.sha256(raw.encode()).hexdigest()[:12]


def route_planner(session: ToolSession, req: RoutePlannerRequest) -> dict[str, Any]:
    network = session.network
    try:
        if req.station_restrictions or req.segment_closures or req.line_closures:
            restrictions = [{"station": r.station, "restriction": r.restriction}
                            for r in req.station_restrictions or []]
            segments: list[tuple[str, ...]] = [tuple(s) for s in req.segment_closures or []]
            if req.line_closures:
                alias = session.system.line_alias
                closures = []
                for lc in req.line_closures:
                    closure: dict[str, Any] = {"line": alias.get(lc.line.lower(), lc.line)}
                    if lc.from_station is not None:
                        closure["from_station"] = lc.from_station
                    if lc.to_station is not None:
                        closure["to_station"] = lc.to_station
                    closures.append(closure)
                segments.extend(network.expand_line_closures(closures))
            route = network.shortest_path_with_restrictions(req.origin, req.destination,
                                                            restrictions, segments)
        else:
            route = network.shortest_path(req.origin, req.destination)
    except RoutingError as exc:
        raise ToolError(404, str(exc)) from None
    except IndexError:  # a closure pair with fewer than two stations: the reference crashed
        raise ToolError(500, INTERNAL_SERVER_ERROR) from None
    rid = route_id_for(req.origin, req.destination)
    session.route_cache[rid] = {
        "origin": route.stops[0]["station_id"] if route.stops else req.origin,
        "destination": route.stops[-1]["station_id"] if route.stops else req.destination,
        "distance_miles": route.distance_miles,
    }
    return RoutePlannerResponse(
        route_id=rid,
        stops=[StopInfo(**stop) for stop in route.stops],
        transfers=route.transfers,
        estimated_minutes=route.estimated_minutes,
        distance_miles=route.distance_miles,
        line_sequence=list(route.line_sequence),
    ).model_dump(mode="json")


def fare_calculator(session: ToolSession, req: FareCalculatorRequest) -> dict[str, Any]:
    cached = session.route_cache.get(req.route_id, {})
    pax = req.passengers
    try:
        quote = session.fares.quote(
            {key: getattr(pax, key) for key in RIDER_KEYS},
            ticket_type=req.ticket_type,
            payment_method=req.payment_method,
            distance_miles=cached.get("distance_miles"),
            origin_id=cached.get("origin"),
            destination_id=cached.get("destination"),
        )
    except FareError as exc:
        raise ToolError(422, str(exc)) from None
    return FareCalculatorResponse(
        fare_id=fare_id_for(req.route_id, pax.adults, pax.children, pax.seniors, pax.disabled,
                            req.ticket_type),
        line_items=quote.items,
        subtotal=quote.subtotal,
        discounts=quote.discounts,
        total=quote.total,
        currency=quote.currency,
    ).model_dump(mode="json")


def _station_subset(station: dict[str, Any], query_type: str) -> dict[str, Any]:
    if query_type == "accessibility":
        return {"name": station.get("name"), "accessibility": station.get("accessibility", {})}
    if query_type == "facilities":
        return {k: v for k, v in station.items() if k != "connections"}
    if query_type == "exits":
        return {"name": station.get("name"), "type": station.get("type"), "zone": station.get("zone")}
    if query_type == "connections":
        return {"name": station.get("name"), "lines": station.get("lines", []),
                "connections": station.get("connections", [])}
    return {"name": station.get("name"), "status": "operational", "alerts": []}


def station_info(session: ToolSession, req: StationInfoRequest) -> dict[str, Any]:
    if req.query_type not in VALID_QUERY_TYPES:
        raise ToolError(422, f"Invalid query_type '{req.query_type}'. "
                             f"Must be one of: {sorted(VALID_QUERY_TYPES)}")
    ids = req.station_ids or ([req.station_id] if req.station_id else [])
    if not ids:
        raise ToolError(422, "Provide station_id or station_ids")
    results = []
    for requested in ids:
        sid = session.network.try_resolve(requested)
        if sid is None:
            raise ToolError(404, f"Station '{requested}' not found")
        station = copy.deepcopy(session.system.stations_raw[sid])
        results.append({"station_id": requested, "data": _station_subset(station, req.query_type)})
    if len(results) == 1 and not req.station_ids:
        return results[0]
    return {"results": results}


def _line_entry(session: ToolSession, requested: str) -> dict[str, Any]:
    system, network = session.system, session.network
    line_id = system.line_alias.get(requested.lower(), requested)
    if line_id not in system.lines:
        raise ToolError(404, f"Unknown line: {requested}")
    line = system.lines[line_id]
    terminals = network.line_terminals(line_id)
    entries = []
    for position, sid in enumerate(line.stations):
        station = system.stations.get(sid)
        entries.append(LineStationEntry(
            station_id=sid,
            station_name=station.name if station else sid,
            position=position,
            is_terminus=sid in terminals,
            connections=sorted(network.station_lines.get(sid, set()) - {line_id}),
        ))
    return LineInfoResponse(
        line_id=line_id, line_name=line.name, color=line.color,
        station_count=len(line.stations), is_loop=network.is_loop_line(line_id),
        terminals=terminals, stations=entries,
    ).model_dump(mode="json")


def line_info(session: ToolSession, req: LineInfoRequest) -> dict[str, Any]:
    requested = req.lines or ([req.line] if req.line else [])
    if not requested:
        raise ToolError(422, "Provide line or lines")
    results = [_line_entry(session, name) for name in requested]
    if len(results) == 1 and not req.lines:
        return results[0]
    return {"results": results}


def disruption_feed(session: ToolSession, req: DisruptionFeedRequest) -> dict[str, Any]:
    items = list(session.disruptions)
    try:
        if req.line:
            wanted = (session.system.line_alias.get(req.line.lower()) or req.line).lower()
            items = [d for d in items if not d.get("line") or d["line"].lower() == wanted]
        if req.station:
            needle = req.station.lower()
            items = [d for d in items
                     if (d.get("segment") and req.station in d["segment"])
                     or needle in d.get("message", "").lower()]
        if req.severity_filter == "major":
            items = [d for d in items if d.get("severity") in ("critical", "warning")]
        elif req.severity_filter == "minor":
            items = [d for d in items if d.get("severity") == "info"]
        if req.current_time:
            now = req.current_time
            items = [d for d in items if not (d.get("valid_until") and d["valid_until"] < now)]
        entries = [DisruptionEntry(**d) for d in items]
    except (AttributeError, TypeError, ValidationError):
        raise ToolError(500, INTERNAL_SERVER_ERROR) from None  # malformed stored disruption
    return DisruptionFeedResponse(disruptions=entries).model_dump(mode="json")


def knowledge_base(session: ToolSession, req: KnowledgeBaseRequest) -> dict[str, Any]:
    policies = session.system.policies
    if req.policy_id:
        for policy in policies:
            if policy.policy_id == req.policy_id:
                result = KnowledgeBaseResult(title=policy.title, content=policy.content,
                                             policy_id=req.policy_id)
                return KnowledgeBaseResponse(results=[result], found=True).model_dump(mode="json")
        return KnowledgeBaseResponse(results=[], found=False).model_dump(mode="json")
    if not req.query:
        return KnowledgeBaseResponse(results=[], found=False).model_dump(mode="json")
    words = [w.lower() for w in req.query.split() if len(w) > 2]
    scored = []
    for policy in policies:
        haystack = (policy.title + " " + policy.content).lower() + " " + " ".join(policy.synonyms).lower()
        hits = sum(1 for w in words if w in haystack)
        if hits > 0:
            scored.append((hits, policy))
    scored.sort(key=lambda pair: pair[0], reverse=True)  # stable: file order among equals
    results = [KnowledgeBaseResult(title=p.title, content=p.content, policy_id=p.policy_id)
               for _, p in scored[:3]]
    return KnowledgeBaseResponse(results=results, found=bool(results)).model_dump(mode="json")


def submit_assistant_state(session: ToolSession, state: TerminalState) -> dict[str, Any]:
    try:
        check_terminal_state(state, session.system.stations)
    except ContractViolation as exc:
        raise ToolError(422, exc.detail) from None
    except StopNotHashable:
        raise ToolError(500, INTERNAL_SERVER_ERROR) from None
    return accepted_body(state)
