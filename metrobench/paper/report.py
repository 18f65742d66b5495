"""Writing the tables and figures the present results allow (``metrobench tables``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from metrobench import layout
from metrobench.paper import deployment, figures, serving_tables
from metrobench.paper import tables as T
from metrobench.data.loader import Benchmark
from metrobench.data.root import SYSTEMS
from metrobench.scoring.errata import ERRATA
from metrobench.scoring.metrics import headline
from metrobench.data.partition import load_split

if TYPE_CHECKING:
    from metrobench.study import StudyConfig


def build_tables(scores: Path, config: StudyConfig, out: Path,
                 only: list[str] | None = None) -> tuple[list[Path], list[str]]:
    """Build every table/figure of the study config; returns (files written, skip messages)."""
    from metrobench.scoring.store import read_scores
    from metrobench.stats.cases import load_case_scores

    loaded: list = []

    def cases():   # read once, and only by the tables that need scores (not Tables 5, 6, deployment)
        if not loaded:
            loaded.append(load_case_scores(read_scores(scores)))
        return loaded[0]

    results = out
    written: list[Path] = []
    skipped: list[str] = []
    frames: dict[str, pd.DataFrame] = {}

    baseline = config.stats.baseline
    builders = {
        "table2": lambda: T.table2(cases(), config, results),
        "table3": lambda: T.table3(cases(), config),
        "table4": lambda: T.table4(cases(), config, results),
        "table7": lambda: T.table7(results),
        "table8": lambda: T.table8(config, results),
        "table9": lambda: pd.concat([T.table9(cases(), config, "full"), T.table9(cases(), config, "holdout")]),
        "table10": lambda: T.table10(cases(), config),
        "protocol": lambda: T.protocol(config, results),
        "table5": lambda: serving_tables.table5(config, results),
        "table6": lambda: serving_tables.table6(config, results),
        "categories": lambda: T.category_matrix(cases(), config, "holdout"),
        "repeats": lambda: T.repeats(cases(), config, results),
        "deployment": lambda: deployment.deployment(config, results, scores),
        "quality_cost": lambda: deployment.quality_cost(cases(), config, results),
    }
    drawings = {
        "figure2": ("table2", lambda p: figures.figure2(frames["table2"], p)),
        "figure3": ("categories", lambda p: figures.figure3(frames["categories"], p)),
        "figure4": ("categories", lambda p: figures.figure4(frames["categories"], baseline, p)),
        "figure5": ("table4", lambda p: figures.figure5(frames["table4"], p)),
        "figure-deployment": ("quality_cost", lambda p: figures.figure_deployment(frames["quality_cost"], p)),
    }
    tables_wanted = [n for n in builders if not only or n in only]
    figures_wanted = [n for n in drawings if not only or n in only]
    needed = set(tables_wanted) | {drawings[n][0] for n in figures_wanted}
    for name, build in builders.items():
        if name not in needed:
            continue
        try:
            frames[name] = build()
        except T.Skip as exc:
            skipped.append(str(exc))
            continue
        if name in tables_wanted:
            path = Path(layout.table_path(name, str(out)))
            T.write_table(frames[name], path, name, config)
            written.append(path)
    for name in figures_wanted:
        source, draw = drawings[name]
        if source not in frames:
            skipped.append(f"{name}: needs {source}")
            continue
        if name == "figure4" and baseline not in set(frames["categories"]["model"]):
            skipped.append(f"{name}: no scores for the baseline")
            continue
        path = Path(layout.table_path(name, str(out), ".png"))
        draw(path)
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
