"""Per-case numbers for statistics and tables, from the Parquet scores.

Case totals are computed exactly as the reference does (Python sums in
breakdown order, 0.1 rounding), once per case; everything after that —
selection, pooling, bootstrapping — works on numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from metrobench.scoring.metrics import CaseTotals, headline
from metrobench.scoring.store import totals_from_table
from metrobench.vocabulary import WHOLE_IN_REPORTS, is_whole


@dataclass
class Cases:
    """One row per (model, case): ids, labels and the case percentages."""

    model: np.ndarray
    system: np.ndarray
    case_id: np.ndarray
    category: np.ndarray
    partition: np.ndarray
    tier1: np.ndarray          # tier1_pct
    composite: np.ndarray      # pct, unjudged components counted 0 (lower bound)
    composite_high: np.ndarray  # pct, unjudged counted at their maximum
    ended: np.ndarray          # the run ended without an error (termination rule)
    totals: dict[str, dict[str, list[CaseTotals]]] = field(repr=False, default_factory=dict)
    totals_high: dict[str, dict[str, list[CaseTotals]]] = field(repr=False, default_factory=dict)
    unjudged: dict[str, int] = field(default_factory=dict)

    def models(self) -> list[str]:
        return sorted(set(self.model.tolist()))

    def mask(self, model: str, partition: str = WHOLE_IN_REPORTS) -> np.ndarray:
        m = self.model == model
        return m if is_whole(partition) else m & (self.partition == partition)

    def by_case(self, model: str, partition: str, metric: str = "tier1") -> dict[str, float]:
        m = self.mask(model, partition)
        return dict(zip(self.case_id[m].tolist(), getattr(self, metric)[m].tolist()))

    def headline(self, model: str, partition: str, fill: str = "zero"):
        """The tables' headline (mean of system means) for one model and partition."""
        source = self.totals if fill == "zero" else self.totals_high
        keep = set(self.case_id[self.mask(model, partition)].tolist())
        return headline({s: [c for c in cases if c.case_id in keep]
                         for s, cases in source.get(model, {}).items()})


def load_case_scores(table: pa.Table) -> Cases:
    low = totals_from_table(table, fill="zero")
    # judge-free scores have one composite; compute the upper bound only when needed
    high = totals_from_table(table, fill="max") if table.column("score").null_count else low
    cols = {n: table.column(n).to_pylist() for n in ("model", "case_id", "partition", "error", "score")}
    info: dict[tuple[str, str], tuple[str, str | None]] = {}
    unjudged: dict[str, int] = {}
    for model, case_id, partition, error, score in zip(cols["model"], cols["case_id"], cols["partition"],
                                                         cols["error"], cols["score"]):
        info.setdefault((model, case_id), (partition, error))
        if score is None:
            unjudged[model] = unjudged.get(model, 0) + 1
    rows = []
    for model, systems in low.items():
        for system, cases in systems.items():
            highs = {c.case_id: c for c in high[model][system]}
            for c in cases:
                partition, error = info[(model, c.case_id)]
                rows.append((model, system, c.case_id, c.category, partition, c.tier1_pct, c.pct,
                             highs[c.case_id].pct, error is None))
    columns = list(zip(*rows)) if rows else [[]] * 9
    out = Cases(*(np.array(col) for col in columns[:5]),
                *(np.array(col, dtype=float) for col in columns[5:8]),
                np.array(columns[8], dtype=bool), totals=low, totals_high=high, unjudged=unjudged)
    return out
