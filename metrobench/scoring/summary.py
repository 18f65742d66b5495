"""Headline numbers from a scores folder: per system and overall, Tier 1 and composite.

Composite needs every judged component. When some were not judged
(``--judge none``) it is reported as two clearly labelled bounds: judged = 0
(the reference's ``--no-judge`` figure) and judged = max. Cases missing from a
run count as failures here; the reference dropped them instead, so where any
are missing the reference's figure is reported beside ours.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from metrobench.errors import MetrobenchError
from metrobench.scoring.metrics import TABLE_ORDER, Headline, headline
from metrobench.scoring.store import totals_from_table
from metrobench.transcripts.records import MISSING
from metrobench.vocabulary import REPORT_PARTITIONS, is_whole


@dataclass(frozen=True)
class ModelSummary:
    model: str
    partition: str
    low: Headline                  # unjudged components counted as 0
    high: Headline                 # ... counted as their maximum
    unjudged: int                  # rows of judged components without a score
    missing: int                   # cases absent from the run
    without_missing: Headline | None  # the reference's convention, when it differs

    @property
    def complete(self) -> bool:
        return self.unjudged == 0


def _rows_of(table: pa.Table, partition: str) -> pa.Table:
    if partition not in REPORT_PARTITIONS:
        raise MetrobenchError(f"unknown partition {partition!r}: use {', '.join(REPORT_PARTITIONS)}")
    if is_whole(partition):
        return table
    return table.filter(pc.equal(table.column("partition"), partition))


def summarise(table: pa.Table, partition: str) -> list[ModelSummary]:
    """One summary per model in ``table`` (models sorted by name)."""
    rows = _rows_of(table, partition)
    if rows.num_rows == 0:
        raise MetrobenchError(f"no scored cases in partition {partition!r}")
    out = []
    for model in sorted(set(rows.column("model").to_pylist())):
        mine = rows.filter(pc.equal(rows.column("model"), model))
        low = totals_from_table(mine, fill="zero")[model]
        high = totals_from_table(mine, fill="max")[model]
        unjudged = mine.filter(pc.is_null(mine.column("score"))).num_rows
        missing_mask = pc.equal(pc.fill_null(mine.column("error"), ""), MISSING)
        missing_ids = set(mine.filter(missing_mask).column("case_id").to_pylist())
        without = None
        if missing_ids:
            without = headline({s: [c for c in v if c.case_id not in missing_ids]
                                for s, v in low.items()})
        out.append(ModelSummary(model, partition, headline(low), headline(high), unjudged,
                                len(missing_ids), without))
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def summary_text(summary: ModelSummary) -> str:
    """A plain-text table for the terminal."""
    low, high = summary.low, summary.high
    composite_label = "composite" if summary.complete else "composite (judge off: low / high)"
    lines = [f"model {summary.model} | partition {summary.partition} | {low.n} cases",
             f"{'system':<10}{'n':>5}{'tier1':>9}  {composite_label}"]
    systems = [s for s in TABLE_ORDER if s in low.n_by_system] + \
        sorted(s for s in low.n_by_system if s not in TABLE_ORDER)
    for s in systems:
        comp = _fmt(low.composite_by_system[s]) if summary.complete else \
            f"{_fmt(low.composite_by_system[s])} / {_fmt(high.composite_by_system[s])}"
        lines.append(f"{s:<10}{low.n_by_system[s]:>5}{low.tier1_by_system[s]:>9.1f}  {comp}")
    comp = f"{low.composite:.2f}" if summary.complete else f"{low.composite:.2f} / {high.composite:.2f}"
    lines.append(f"{'headline':<10}{low.n:>5}{low.tier1:>9.2f}  {comp}")
    if not summary.complete:
        lines.append(f"{summary.unjudged} judged component scores are missing (scored with "
                     "--judge none): composite is bounded, Tier 1 is exact.")
    if summary.without_missing is not None:
        ref = summary.without_missing
        lines.append(f"{summary.missing} cases are missing from the run and count as failures above; "
                     f"dropping them as the reference did gives Tier 1 {ref.tier1:.2f}, "
                     f"composite {ref.composite:.2f}" + ("" if summary.complete else " (low)"))
    return "\n".join(lines)
