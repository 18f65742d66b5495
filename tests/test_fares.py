"""Fare engine: every Category B ground-truth quote, and the worked values of spec §4."""

from __future__ import annotations

import pytest

from metrobench.data import SYSTEMS
from metrobench.data.models import PassengerCountChanged, PaymentMethodSelected
from metrobench.kiosk.fares import FareEngine, FareError


def test_every_category_b_fare_matches_ground_truth(bench):
    checked = 0
    for system in SYSTEMS:
        engine = FareEngine(bench.system(system).fares)
        for case in bench.cases(system):
            if case.category != "B":
                continue
            pax, method = {}, "breeze_card"
            for event in case.events:
                if isinstance(event, PassengerCountChanged):
                    pax = {k: v for k, v in event.model_dump().items() if k != "type" and v is not None}
                elif isinstance(event, PaymentMethodSelected):
                    method = event.method
            route = case.ground_truth.route
            quote = engine.quote(pax, payment_method=method, distance_miles=route.distance_miles,
                                 origin_id=route.path[0], destination_id=route.path[-1])
            expected = case.raw["ground_truth"]["fare"]
            got = {"items": quote.items, "subtotal": quote.subtotal, "discounts": quote.discounts,
                   "total": quote.total, "currency": quote.currency}
            assert {k: got[k] for k in expected} == expected, case.id
            checked += 1
    assert checked == 93


def test_bart_senior_multiplier_rounding(bench):
    quote = FareEngine(bench.system("bart").fares).quote(
        {"seniors": 2}, distance_miles=7.46, origin_id="BART-EMBR", destination_id="BART-DALY")
    assert quote.items == [{"label": "Senior x2", "amount": 2.62, "currency": "USD"}]
    assert quote.total == 2.62


def test_beijing_airport_express_replaces_base(bench):
    quote = FareEngine(bench.system("beijing").fares).quote(
        {"adults": 1, "seniors": 1}, distance_miles=3.0, origin_id="BJM-DONZ", destination_id="BJM-3HH")
    assert quote.total == 25
    assert quote.items[1] == {"label": "Senior x1", "amount": 0.0, "currency": "CNY"}
    assert quote.items[-1]["label"].startswith("Capital Airport Express") and quote.items[-1]["amount"] == 0.0


def test_cta_ohare_override_ignores_payment_adjustment(bench):
    engine = FareEngine(bench.system("cta").fares)
    assert engine.quote({"adults": 1}, payment_method="contactless", origin_id="CTA-ORD").total == 5.0
    assert engine.quote({"adults": 1}, payment_method="contactless").total == 3.0
    assert engine.quote({"adults": 1}, payment_method="unknown").total == 2.5


def test_children_allowance_and_gold_class(bench):
    doha = FareEngine(bench.system("doha").fares)
    quote = doha.quote({"adults": 1, "children": 3}, payment_method="gold_travel_card")
    assert quote.items == [{"label": "Adult x1", "amount": 10, "currency": "QAR"},
                           {"label": "Child (fare required) x1", "amount": 10, "currency": "QAR"}]
    assert quote.discounts == [{"label": "Child (under 5, free) x2", "amount": 0.0, "currency": "QAR"}]
    assert quote.total == 20
    # no paying rider: no free children; Doha has no senior discount
    alone = doha.quote({"children": 1, "seniors": 1})
    assert [i["label"] for i in alone.items] == ["Senior x1"] and alone.total == 2
    assert doha.quote({"children": 2}).total == 4


def test_distance_model_needs_a_distance_and_valid_counts(bench):
    engine = FareEngine(bench.system("taipei").fares)
    with pytest.raises(FareError, match="^route_distance_miles required for distance fare model$"):
        engine.quote({"adults": 1})
    with pytest.raises(FareError, match="non-negative integer"):
        engine.quote({"adults": -1}, distance_miles=2.0)
    assert engine.quote({"adults": 1}, distance_miles=1000).total == 65
