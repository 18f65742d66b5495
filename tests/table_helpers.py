"""A paper table built as ``metrobench tables --only NAME`` builds it, from a study config a test writes.

The table registry (:mod:`metrobench.paper.registry`) resolves the config into the builder's
inputs, so a test that states its study as config sections checks the resolution and the
builder together; ``cases`` are the test's synthetic scores (no Parquet read).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from metrobench.paper.inputs import Printed
from metrobench.paper.registry import TABLES, TableInputs
from metrobench.stats.cases import Cases
from metrobench.study import StudyConfig


def sources(config: StudyConfig, cases: Cases | None = None, results: Path | str = "results",
            scores: Path | str = "scores") -> TableInputs:
    """The registry's view of ``config`` over ``results`` (the tables' inputs, resolved on demand)."""
    return TableInputs(config, Path(results), Path(scores), cases)


def built(name: str, config: StudyConfig, cases: Cases | None = None, results: Path | str = "results",
          scores: Path | str = "scores") -> pd.DataFrame:
    """Table ``name``'s frame as its registry declaration builds it (Skip when it cannot)."""
    return TABLES[name].build(sources(config, cases, results, scores))


def printed(config: StudyConfig, name: str) -> Printed:
    """What table ``name``'s Markdown prints with (labels, Table 2's rule, its note), as resolved for it."""
    return sources(config).printed(name)
