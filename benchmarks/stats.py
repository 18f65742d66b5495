"""Aggregation and bootstrap speed on a paper-sized score matrix (26 models x 955 cases x 22 components).

Synthetic but shaped like the real thing: every model gets a score for every
applicable component of every real case (random within its maximum, seeded),
written as Parquet by the real store. Timed: reading the scores back, exact
per-case totals, and 5,000-resample bootstrap intervals (two statistics, both
partitions) for all 26 models plus four paired comparisons.

Usage: python benchmarks/stats.py [--data ROOT]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from metrobench.data import SYSTEMS, Benchmark
from metrobench.data.partition import load_split
from metrobench.scoring.scorer import CaseScore, ComponentScore, applicable
from metrobench.scoring.store import read_scores, write_scores
from metrobench.stats.cases import load_case_scores
from metrobench.paper.inputs import Model, Resampling
from metrobench.paper.tables import category_matrix, table9, table10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("METROBENCH_DATA"))
    parser.add_argument("--models", type=int, default=26)
    args = parser.parse_args()
    bench = Benchmark.open(args.data)
    split = load_split(bench)
    rng = random.Random(42)
    models = [f"model-{i:02d}" for i in range(args.models)]
    with tempfile.TemporaryDirectory() as tmp:
        rows = 0
        for model in models:
            skill = rng.uniform(0.5, 0.95)
            for system in SYSTEMS:
                scores = []
                for case in bench.cases(system):
                    comps = [ComponentScore(name, round(maximum * min(1.0, rng.random() + skill - 0.3), 1),
                                            maximum, "", judged=False)
                             for name, maximum in applicable(case.raw)]
                    rows += len(comps)
                    scores.append(CaseScore(case.id, case.category, comps))
                write_scores(Path(tmp), model, system, scores, split)
        resampling = Resampling(n_resamples=5000, seed=42)
        each = [Model.single(m) for m in models]
        pairs = [(each[i], each[i + 1]) for i in range(4)]
        start = time.perf_counter()
        table = read_scores(Path(tmp))
        read = time.perf_counter()
        cases = load_case_scores(table)
        loaded = time.perf_counter()
        t9 = [table9(cases, each, resampling, p) for p in ("full", "holdout")]
        booted = time.perf_counter()
        t10 = table10(cases, pairs, resampling)
        cats = category_matrix(cases, each)
        end = time.perf_counter()
    print(f"{len(models)} models, {table.num_rows:,} component rows ({rows:,} written), "
          f"{len(cases.case_id):,} model-cases")
    print(f"read {read - start:.2f} s; exact per-case totals {loaded - read:.2f} s; "
          f"bootstrap 2 x {len(models)} models x 2 statistics x 2 metrics {booted - loaded:.2f} s; "
          f"paired x 8 + categories {end - booted:.2f} s")
    print(f"total {end - start:.2f} s ({len(t9[0]) + len(t9[1])} interval rows, {len(t10)} comparisons, "
          f"{len(cats)} category cells)")


if __name__ == "__main__":
    main()
