"""Statistics with hand-computed answers, and the rule baseline's intervals and category profile."""

from __future__ import annotations

import subprocess
import sys

import pytest

from metrobench.cli import main
from metrobench.data import SYSTEMS
from metrobench.scoring.store import read_scores
from metrobench.stats.bootstrap import (
    bootstrap,
    bootstrap_stratified,
    holm,
    paired_bootstrap,
    percentile_index,
    seed_mean,
    seed_spread,
    two_sided_p,
)
from metrobench.stats.cases import load_case_scores
from metrobench.tables import category_matrix, table9


def test_percentile_indices_match_the_reference():
    assert (percentile_index(2000, 2.5), percentile_index(2000, 97.5)) == (50, 1949)
    assert (percentile_index(5000, 2.5), percentile_index(5000, 97.5)) == (125, 4874)


def test_degenerate_and_simple_intervals():
    flat = bootstrap([3.0, 3.0, 3.0], n_resamples=200)
    assert (flat.estimate, flat.lo, flat.hi, flat.n) == (3.0, 3.0, 3.0, 3)
    interval = bootstrap([0.0, 100.0], n_resamples=2000, seed=1)
    assert interval.estimate == 50.0 and interval.lo == 0.0 and interval.hi == 100.0
    strat = bootstrap_stratified([[1.0, 1.0], [3.0, 3.0, 3.0]], n_resamples=100)
    assert (strat.estimate, strat.lo, strat.hi, strat.n) == (2.0, 2.0, 2.0, 5)  # mean of means, not 2.2


def test_paired_bootstrap_and_p_values():
    a = {"x": 1.0, "y": 2.0, "z": 3.0}
    same, p = paired_bootstrap(a, dict(a), n_resamples=500)
    assert (same.estimate, same.lo, same.hi) == (0.0, 0.0, 0.0) and p == 1.0
    better, p = paired_bootstrap({k: v + 5 for k, v in a.items()}, {**a, "extra": 9.0}, n_resamples=500)
    assert better.n == 3 and better.estimate == 5.0 and better.excludes_zero()
    assert p == pytest.approx(2 / 501)  # no resample at or below zero: (0 + 1) / (n + 1), two-sided
    import numpy as np

    assert two_sided_p(np.array([-1.0, 1.0, 2.0, 3.0])) == pytest.approx(2 * 2 / 5)


def test_holm_and_seed_helpers():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert seed_spread([91.82, 90.83]) == pytest.approx(0.495)
    assert seed_mean([{"a": 1.0, "b": 2.0}, {"a": 3.0}]) == {"a": 2.0}


def test_intervals_are_the_same_in_every_process():
    code = ("from metrobench.stats.bootstrap import bootstrap, seed_mean;"
            "d = seed_mean([{str(i): float(i % 7) for i in range(50)}, {str(i): float(i % 5) for i in range(50)}]);"
            "print(bootstrap(list(d.values()), n_resamples=300))")
    outputs = {subprocess.run([sys.executable, "-c", code], env={"PYTHONHASHSEED": str(seed)},
                              capture_output=True, text=True).stdout for seed in (0, 1, 2)}
    assert len(outputs) == 1 and "Interval" in outputs.pop()


@pytest.fixture(scope="module")
def baseline_cases(tmp_path_factory, root):
    base = tmp_path_factory.mktemp("baseline")
    for system in SYSTEMS:
        assert main(["rule-agent", "--data", str(root), "--system", system,
                     "--out", str(base / "runs" / f"{system}.jsonl")]) == 0
    args = ["score", "--data", str(root), "--out", str(base / "scores")]
    for system in SYSTEMS:
        args += ["--run", str(base / "runs" / f"{system}.jsonl")]
    assert main(args) == 0
    return load_case_scores(read_scores(base / "scores"))


def test_rule_baseline_interval_and_category_profile(baseline_cases):
    config = {"stats": {"n_resamples": 5000, "seed": 42}}
    frame = table9(baseline_cases, config, "holdout").set_index("statistic")
    headline = frame.loc["headline"]
    assert headline["tier1"] == 84.6 and headline["n"] == 238
    assert 82.2 <= headline["tier1_lo"] <= 82.7 and 86.4 <= headline["tier1_hi"] <= 86.9
    pooled = frame.loc["pooled"]
    assert 82.2 <= pooled["tier1_lo"] <= 82.7 and 86.4 <= pooled["tier1_hi"] <= 86.9
    cats = category_matrix(baseline_cases, {}, "holdout").set_index("category")["tier1"]
    assert (cats["A"], cats["B"], cats["D"], cats["I"]) == (100.0, 99.5, 70.2, 50.3)
    # Spec §8.2 lists K 77.3 for the hash-seed realisation in which BART-K-002 keeps its
    # fare; in the paper's realisation (the one reproducing 84.60) it is advisory_only.
    assert cats["K"] == 76.1
