"""From component scores to the numbers in the paper's tables (spec §7.4-§7.5).

Per case: total, maximum and percent (rounded to 0.1), for all components and
for Tier 1 alone. Per system: the mean of the case percents (0.1). Headline:
the unweighted mean of the six system values. Per category: points-weighted.
Sums run in the reference's order (components in breakdown order, cases in
case-file order), so the float rounding matches it too.

A judged component without a judge has no score. ``fill`` says what to count
for it: ``"zero"`` (the lower bound, equal to the reference's ``--no-judge``
figures) or ``"max"`` (the upper bound).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Systems in the order the reference's tables average them.
TABLE_ORDER = ("marta", "bart", "cta", "doha", "taipei", "beijing")


@dataclass(frozen=True)
class Component:
    name: str
    tier: int
    score: float | None
    max: float


@dataclass(frozen=True)
class CaseTotals:
    case_id: str
    system: str
    total: float
    max_possible: float
    pct: float
    tier1_total: float
    tier1_max: float
    tier1_pct: float
    components: dict[str, tuple[float, float]]  # name -> (score, max), unjudged filled

    @property
    def category(self) -> str:
        return self.case_id.split("-")[1]


def case_totals(case_id: str, system: str, components: Sequence[Component], *,
                fill: str = "zero") -> CaseTotals:
    """The reference's per-case totals (``CaseScore``) from components in breakdown order."""
    values: dict[str, tuple[float, float]] = {}
    for c in components:
        score = c.score if c.score is not None else (c.max if fill == "max" else 0)
        values[c.name] = (score, c.max)
    total = sum(values[c.name][0] for c in components)
    maximum = sum(c.max for c in components)
    t1_total = sum(values[c.name][0] for c in components if c.tier == 1)
    t1_max = sum(c.max for c in components if c.tier == 1)
    return CaseTotals(
        case_id=case_id, system=system,
        total=round(total, 1), max_possible=round(maximum, 1),
        pct=round(total / maximum * 100, 1) if maximum > 0 else 0,
        tier1_total=round(t1_total, 1), tier1_max=round(t1_max, 1),
        tier1_pct=round(t1_total / t1_max * 100, 1) if t1_max > 0 else 0,
        components=values,
    )


def _mean1(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 1)


def _rate(cases: Sequence[CaseTotals], component: str, *, among_all: bool = False) -> float:
    having = [c for c in cases if component in c.components]
    base = cases if among_all else having
    if not base:
        return 0
    misses = sum(1 for c in having if c.components[component][0] < c.components[component][1])
    return round(misses / len(base) * 100, 1)


def compute_metrics(cases: Sequence[CaseTotals]) -> dict:
    """The reference's ``compute_metrics`` over some cases (without the timing block)."""
    if not cases:
        return {}
    n = len(cases)
    by_cat: dict[str, list[float]] = {}
    t1_cat: dict[str, list[float]] = {}
    by_sys: dict[str, list[float]] = {}
    t1_sys: dict[str, list[float]] = {}
    for c in cases:
        points = by_cat.setdefault(c.category, [0, 0])
        points[0] += c.total
        points[1] += c.max_possible
        t1_points = t1_cat.setdefault(c.category, [0, 0])
        t1_points[0] += c.tier1_total
        t1_points[1] += c.tier1_max
        prefix = c.case_id.split("-")[0]
        by_sys.setdefault(prefix, []).append(c.pct)
        t1_sys.setdefault(prefix, []).append(c.tier1_pct)
    system_means = {s: _mean1(v) for s, v in sorted(by_sys.items())}
    t1_system_means = {s: _mean1(v) for s, v in sorted(t1_sys.items())}
    svr = sum(1 for c in cases
              if c.components.get("renderable_state_validity", (0, 5))[0]
              == c.components.get("renderable_state_validity", (0, 5))[1])
    return {
        "sr_pct": round(sum(1 for c in cases if c.total >= 0.7 * c.max_possible) / n * 100, 1),
        "fer_pct": _rate(cases, "fare_correct"),
        "thr_pct": _rate(cases, "no_tool_hallucination", among_all=True),
        "amr_pct": _rate(cases, "advisory_issued"),
        "svr_pct": round(svr / n * 100, 1),
        "metrollm_composite": round(sum(system_means.values()) / len(system_means), 1),
        "by_category": {k: round(v[0] / v[1] * 100, 1) for k, v in sorted(by_cat.items())},
        "by_system": system_means,
        "tier1_composite": round(sum(t1_system_means.values()) / len(t1_system_means), 1),
        "tier1_by_category": {k: round(v[0] / v[1] * 100, 1) if v[1] > 0 else 0
                              for k, v in sorted(t1_cat.items())},
        "tier1_by_system": t1_system_means,
    }


@dataclass(frozen=True)
class Headline:
    """One model's headline: per-system values and their unweighted mean."""

    tier1_by_system: dict[str, float]
    composite_by_system: dict[str, float]
    n_by_system: dict[str, int]

    @property
    def tier1(self) -> float:
        return _mean(self.tier1_by_system)

    @property
    def composite(self) -> float:
        return _mean(self.composite_by_system)

    @property
    def n(self) -> int:
        return sum(self.n_by_system.values())


def _mean(by_system: dict[str, float]) -> float:
    values = [by_system[s] for s in TABLE_ORDER if s in by_system]
    values += [v for s, v in by_system.items() if s not in TABLE_ORDER]
    return sum(values) / len(values) if values else float("nan")


def headline(cases_by_system: dict[str, Sequence[CaseTotals]]) -> Headline:
    """``score_split.py``: per system ``compute_metrics``, then the mean over systems."""
    tier1, composite, n = {}, {}, {}
    for system, cases in cases_by_system.items():
        if not cases:
            continue
        metrics = compute_metrics(cases)
        tier1[system] = metrics["tier1_composite"]
        composite[system] = metrics["metrollm_composite"]
        n[system] = len(cases)
    return Headline(tier1, composite, n)
