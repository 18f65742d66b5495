"""The fare engine: flat, distance and flat-with-exceptions models (reference spec §4).

A quote is a list of line items (one per rider type, plus zero-amount
information items for surcharges), a list of discounts (free children, amount
0), a subtotal and a total. Every amount is rounded to cents with Python's
``round`` at the same points as the reference, so totals match to the cent —
including its ``round(3.5 * 0.375, 2) == 1.31`` for a BART senior.

``ticket_type`` is accepted and ignored by every model, as in the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metrobench.data.models import Discount, FareRules
from metrobench.vocabulary import RIDER_KEYS


class FareError(ValueError):
    """The quote cannot be computed (the fare tool answers 422 with this message)."""


@dataclass(frozen=True)
class FareQuote:
    items: list[dict[str, Any]]
    subtotal: float
    discounts: list[dict[str, Any]]
    total: float
    currency: str


class FareEngine:
    """Quotes fares for one system's ``fares.json``."""

    def __init__(self, rules: FareRules) -> None:
        self.rules = rules
        self.currency = rules.currency

    def quote(
        self,
        passengers: dict[str, Any],
        *,
        ticket_type: str = "single",
        payment_method: str = "smartcard",
        distance_miles: float | None = None,
        origin_id: str | None = None,
        destination_id: str | None = None,
    ) -> FareQuote:
        """Quote a single journey for ``passengers`` (missing rider keys count as 0)."""
        del ticket_type  # ignored by every fare model, as in the reference
        for key in RIDER_KEYS:
            value = passengers.get(key, 0)
            if not isinstance(value, int) or value < 0:
                raise FareError(f"Passenger count for '{key}' must be a non-negative integer, got {value!r}")
        model = self.rules.model
        surcharges: list[tuple[str, float]] = []
        if model == "flat":
            per_ride = self._flat_per_ride(payment_method)
        elif model == "flat_with_exceptions":
            per_ride = self._override_per_ride(payment_method, origin_id, destination_id)
        elif model == "distance":
            if distance_miles is None:
                raise FareError("route_distance_miles required for distance fare model")
            per_ride, surcharges = self._distance_per_ride(distance_miles, origin_id, destination_id)
        else:  # pragma: no cover - the FareRules model admits only the three above
            raise NotImplementedError(f"Fare model '{model}' not yet implemented")
        return self._itemise(passengers, per_ride, surcharges)

    # ------------------------------------------------------------------ per-ride fare

    def _flat_per_ride(self, method: str) -> float:
        rules = self.rules
        if rules.gold_fare is not None and self._is_gold(method):
            return rules.gold_fare
        return rules.base_fare

    def _is_gold(self, method: str) -> bool:
        info = self.rules.payment_methods.get(method)
        return (info is not None and info.class_ == "gold") or "gold" in method.lower()

    def _adjustment(self, method: str) -> float:
        info = self.rules.payment_methods.get(method)
        return info.fare_adjustment if info is not None and info.fare_adjustment is not None else 0.0

    def _override_per_ride(self, method: str, origin: str | None, destination: str | None) -> float:
        overrides = self.rules.station_overrides or {}
        for sid in (origin, destination):
            if sid and sid in overrides:
                override = overrides[sid]
                if override.ignores_payment_adjustment:
                    return round(override.fare, 2)
                return round(override.fare + self._adjustment(method), 2)
        return round(self.rules.base_fare + self._adjustment(method), 2)

    def _distance_per_ride(self, miles: float, origin: str | None,
                           destination: str | None) -> tuple[float, list[tuple[str, float]]]:
        brackets = self.rules.fare_brackets or []
        base = next((b.fare for b in brackets if miles <= b.max_miles), brackets[-1].fare)
        applicable: list[tuple[str, float, bool]] = []
        for key, s in (self.rules.surcharges or {}).items():
            label = s.description or f"{key} surcharge"
            if s.sf_side is not None and s.east_bay_side is not None:
                hit = bool(origin and destination) and (
                    (origin in s.sf_side and destination in s.east_bay_side)
                    or (origin in s.east_bay_side and destination in s.sf_side))
            elif s.station is not None:
                hit = s.station in (origin, destination)
            elif s.stations is not None:
                hit = origin in s.stations or destination in s.stations
            else:
                hit = False
            if hit:
                applicable.append((label, s.amount, s.replaces_base))
        replacing = [amount for _, amount, replaces in applicable if replaces]
        if replacing:
            per_ride = max(replacing)
        else:
            per_ride = round(base + sum(amount for _, amount, _ in applicable), 2)
        return per_ride, [(label, amount) for label, amount, _ in applicable]

    # ------------------------------------------------------------------ line items

    def _reduced(self, discount: Discount | None, per_ride: float) -> float:
        if discount is None:
            return per_ride
        if discount.multiplier is not None:
            return round(per_ride * discount.multiplier, 2)
        if discount.fare is not None:
            return discount.fare
        return per_ride

    def _itemise(self, passengers: dict[str, Any], per_ride: float,
                 surcharges: list[tuple[str, float]]) -> FareQuote:
        adults, children, seniors, disabled = (passengers.get(k, 0) for k in RIDER_KEYS)
        discounts_cfg = self.rules.discounts
        currency = self.currency
        items: list[dict[str, Any]] = []
        free: list[dict[str, Any]] = []

        def item(label: str, unit: float, count: int) -> dict[str, Any]:
            return {"label": f"{label} x{count}", "amount": round(unit * count, 2), "currency": currency}

        if adults > 0:
            items.append(item("Adult", per_ride, adults))
        if seniors > 0:
            items.append(item("Senior", self._reduced(discounts_cfg.get("senior_65_plus"), per_ride), seniors))
        if disabled > 0:
            items.append(item("Disabled", self._reduced(discounts_cfg.get("disabled"), per_ride), disabled))
        child_cfg = discounts_cfg.get("children")
        qualifier = (child_cfg.qualifier if child_cfg and child_cfg.qualifier is not None else "free")
        per_payer = (child_cfg.max_per_adult if child_cfg and child_cfg.max_per_adult is not None else 2)
        payers = adults + seniors + disabled
        free_children = min(children, payers * per_payer) if payers > 0 else 0
        if free_children > 0:
            free.append({"label": f"Child ({qualifier}, free) x{free_children}", "amount": 0.0,
                         "currency": currency})
        if children - free_children > 0:
            items.append(item("Child (fare required)", per_ride, children - free_children))
        for label, _ in surcharges:
            items.append({"label": label, "amount": 0.0, "currency": currency})
        subtotal = round(sum(i["amount"] for i in items), 2)
        total = round(subtotal - round(sum(d["amount"] for d in free), 2), 2)
        return FareQuote(items, subtotal, free, total, currency)
