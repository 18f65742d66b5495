"""Writing the tables and figures the present results allow (``metrobench tables``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from metrobench import layout
from metrobench.paper import tables as T
from metrobench.paper.registry import FIGURES, TABLES, TableInputs
from metrobench.data.loader import Benchmark
from metrobench.data.root import SYSTEMS
from metrobench.scoring.errata import ERRATA
from metrobench.scoring.metrics import headline
from metrobench.data.partition import load_split

if TYPE_CHECKING:
    from metrobench.study import StudyConfig


def build_tables(scores: Path, config: StudyConfig, out: Path,
                 only: list[str] | None = None) -> tuple[list[Path], list[str]]:
    """Build every table/figure of the registry (:mod:`metrobench.paper.registry`) that ``only``
    names (all without it); returns (files written, skip messages).

    Scores are read once, and only by the tables that need them (not Tables 5, 6, deployment);
    a figure's table is built for it and written only when named too.
    """
    sources = TableInputs(config, out, scores)
    written: list[Path] = []
    skipped: list[str] = []
    frames: dict[str, pd.DataFrame] = {}

    tables_wanted = [n for n in TABLES if not only or n in only]
    figures_wanted = [n for n in FIGURES if not only or n in only]
    needed = set(tables_wanted) | {FIGURES[n].table for n in figures_wanted}
    for name, table in TABLES.items():
        if name not in needed:
            continue
        try:
            frames[name] = table.build(sources)
        except T.Skip as exc:
            skipped.append(str(exc))
            continue
        if name in tables_wanted:
            path = Path(layout.table_path(name, str(out)))
            T.write_table(frames[name], path, name, sources.printed(name))
            written.append(path)
    for name in figures_wanted:
        figure = FIGURES[name]
        if figure.table not in frames:
            skipped.append(f"{name}: needs {figure.table}")
            continue
        problem = figure.check(frames, sources)
        if problem:
            skipped.append(f"{name}: {problem}")
            continue
        path = Path(layout.table_path(name, str(out), ".png"))
        figure.draw(frames, sources, path)
        written.append(path)
    return written, skipped


def errata_table(bench: Benchmark, runs: Path, models: list[str]) -> pd.DataFrame:
    """Held-out and full Tier 1 / composite (judge off: lower bound) under each erratum.

    Each run is scored as ``metrobench score`` scores it (its recorded cases), once per erratum.
    """
    from metrobench.scoring.runs import score_run

    split = load_split(bench)
    rows = []
    for name in ["default", *ERRATA]:
        errata = frozenset() if name == "default" else frozenset({name})
        for model in models:
            totals = {}
            for system in SYSTEMS:
                scored = score_run(bench, layout.run_file(str(runs), model, system), judge=None, errata=errata,
                                   partitions=split, model=model, system=system, warn=lambda _: None)
                totals[system] = [s.totals(system) for s in scored.scores]
            held = headline({s: [c for c in v if split.get(c.case_id) == "holdout"] for s, v in totals.items()})
            full = headline(totals)
            rows.append({"erratum": name, "model": model, "holdout_tier1": round(held.tier1, 2),
                         "holdout_composite_low": round(held.composite, 2), "full_tier1": round(full.tier1, 2),
                         "full_composite_low": round(full.composite, 2)})
    frame = pd.DataFrame(rows)
    base = frame[frame["erratum"] == "default"].set_index("model")
    frame["delta_holdout_tier1"] = [round(r.holdout_tier1 - base.loc[r.model, "holdout_tier1"], 2)
                                    for r in frame.itertuples()]
    return frame
