"""A per-case tool session: the state the reference kept in module-level globals.

The reference tool server keeps disruptions per case but its route cache per
*system*, so two concurrent cases of one system could overwrite each other's
``route_id`` entries (reference spec §13 #16). A :class:`ToolSession` owns all
mutable state of one case — its disruptions, its current time and its route
cache — and shares only immutable data (the loaded system, its network and fare
engine), so any number of cases can run concurrently in one process.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from metrobench.data.loader import SystemData
from metrobench.data.models import Case
from metrobench.kiosk.fares import FareEngine
from metrobench.kiosk.network import MetroNetwork, network_for


def normalise_disruptions(disruptions: list[Any]) -> list[Any]:
    """Copy a disruption list, flattening ``segment`` objects to their station lists.

    events.yaml writes a segment as ``{from_station, to_station, stations}``; the
    reference server flattens it on ``set_disruptions`` and so do we.
    """
    out = copy.deepcopy(disruptions)
    for item in out:
        if isinstance(item, dict) and isinstance(item.get("segment"), dict):
            item["segment"] = list(item["segment"].get("stations") or [])
    return out


@dataclass
class ToolSession:
    """Mutable tool state of one case over one system."""

    system: SystemData
    case_id: str | None = None
    current_time: str | None = None
    disruptions: list[Any] = field(default_factory=list)
    route_cache: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def for_case(cls, system: SystemData, case: Case) -> "ToolSession":
        """A session set up as the reference runner sets up a case (spec §5.2, §6.5)."""
        context = case.system_context
        temporal = context.temporal_context
        current_time = (temporal.current_time if temporal and temporal.current_time else None) \
            or context.current_time
        raw_disruptions = case.raw.get("system_context", {}).get("active_disruptions") or []
        return cls(system=system, case_id=case.id, current_time=current_time,
                   disruptions=normalise_disruptions(raw_disruptions))

    def set_disruptions(self, disruptions: list[Any]) -> None:
        self.disruptions = normalise_disruptions(disruptions)

    @property
    def network(self) -> MetroNetwork:
        return network_for(self.system)

    @cached_property
    def fares(self) -> FareEngine:
        return FareEngine(self.system.fares)
