"""The scorer pinned case by case: every component of every case, six answers each, equal to the golden file.

The golden file is ``tests/data/golden_scores.parquet``; ``tests/golden_scores.py``
says what the answers are and how to regenerate it (only after a deliberate
change of scoring behaviour).
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from golden_scores import COLUMNS, GOLDEN, VARIANTS, build

KEY = ("variant", "case_id", "component")


@pytest.fixture(scope="module")
def tables(bench):
    return pq.read_table(GOLDEN).to_pandas(), build(bench).to_pandas()


def _differences(golden, now, limit: int = 12) -> list[str]:
    merged = golden.merge(now, on=list(KEY), how="outer", suffixes=("_golden", "_now"), indicator="side")
    where = {"left_only": "the golden file", "right_only": "the new scores"}
    lines = [f"{row.variant} {row.case_id} {row.component}: only in {where[row.side]}"
             for row in merged[merged["side"] != "both"].itertuples()]
    both = merged[merged["side"] == "both"]
    for column in ("score", "max", "tier", "judged", "reason", "partition"):
        a, b = both[f"{column}_golden"], both[f"{column}_now"]
        changed = both[~((a == b) | (a.isna() & b.isna()))]
        lines += [f"{row.variant} {row.case_id} {row.component}: {column} "
                  f"{getattr(row, column + '_golden')!r} -> {getattr(row, column + '_now')!r}"
                  for row in changed.itertuples()]
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])


def test_golden_file_covers_every_case_and_variant(tables):
    golden, _ = tables
    assert tuple(golden.columns) == COLUMNS
    assert set(golden["variant"]) == set(VARIANTS)
    assert golden.groupby("variant")["case_id"].nunique().eq(955).all()
    assert not golden.duplicated(list(KEY)).any()
    assert GOLDEN.stat().st_size < 300_000


def test_every_component_score_equals_the_golden_file(tables):
    golden, now = tables
    differences = _differences(golden, now)
    assert not differences, "scores differ from tests/data/golden_scores.parquet:\n" + "\n".join(differences)
    assert golden.equals(now)  # and exactly: same rows, order, dtypes and floats


@pytest.mark.parametrize(("variant", "component", "expected"), [
    # branches the answers were built to reach (spec §7.3), so a changed constant shows up here by name
    ("partial-tools", "tool_calls_correct", 5.0),      # partial: some expected tools called
    ("partial-tools", "re_planning_efficiency", 3.0),  # re-planned without restrictions
    ("mentions", "disruption_detected", 8.0),          # mentioned, feed not called
    ("mentions", "accessibility_accuracy", 3.0),       # some issue stations mentioned
    ("near-miss", "passenger_summary_correct", 3.0),   # some passenger fields right
    ("near-miss", "route_correct", 8.0),               # transfers off by one: 3 + distance 5
    ("mentions", "purchase_gate_correct", 2.5),        # reason right, action wrong
    ("mentions", "advisory_issued", 5.0),              # banner of the wrong severity
    ("ground-truth", "advisory_issued", 10.0),
    ("ground-truth", "context_update_detected", 5.0),
    ("partial-tools", "context_update_detected", 2.0),  # two submissions, no re-plan between
    ("partial-tools", "tool_calls_correct", 7.0),       # route planned where there is no service
    ("odd", "renderable_state_validity", 3.0),         # two of the four checks
    ("odd", "scope_adherence", 5.0),                   # nothing said: nothing out of scope
    ("odd", "no_tool_hallucination", 1.0),             # 25 - 12 x 2 invented tools
    ("odd", "renderable_state_validity", 1.0),         # valid JSON, nothing expected in it
])
def test_the_golden_answers_reach_the_partial_credit_branches(tables, variant, component, expected):
    golden, _ = tables
    scores = golden[(golden["variant"] == variant) & (golden["component"] == component)]["score"]
    assert (scores == expected).any()
