"""Judge-calibration agreement statistics."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from metrobench.cli import main
from metrobench.stats.agreement import agreement_table, gwet_ac2, kappa_interval, read_ratings, weighted_kappa


def _kappa_by_moments(a, b):
    """Quadratic-weighted kappa equals 2 cov / (var_a + var_b + (mean_a - mean_b)^2)."""
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b)) / len(a)
    return 2 * cov / (statistics.pvariance(a) + statistics.pvariance(b) + (ma - mb) ** 2)


def test_weighted_kappa_matches_the_moment_identity():
    rng = random.Random(7)
    for _ in range(20):
        a = [rng.choice([0, 1, 2, 2, 2]) for _ in range(50)]
        b = [x if rng.random() < 0.7 else rng.choice([0, 1, 2]) for x in a]
        assert weighted_kappa(a, b) == pytest.approx(_kappa_by_moments(a, b))


def test_ac2_values_by_hand_and_the_kappa_paradox():
    assert gwet_ac2([0, 2], [2, 0]) == pytest.approx(-1.0)  # pa 0, pe 0.5
    assert gwet_ac2([0, 1, 2], [0, 1, 2]) == pytest.approx(1.0)
    # Nearly all 2s: kappa collapses while AC2 stays high (paper Table 1's pattern).
    a = [2] * 95 + [1] * 5
    b = [2] * 93 + [1, 1] + [2] * 4 + [1]
    assert weighted_kappa(a, b) < 0.3 < 0.9 < gwet_ac2(a, b)
    assert math.isnan(weighted_kappa([2, 2], [2, 2]))


def test_bootstrap_interval_is_seeded_and_brackets_the_estimate():
    rng = random.Random(3)
    a = [rng.choice([0, 1, 2]) for _ in range(100)]
    b = [x if rng.random() < 0.6 else rng.choice([0, 1, 2]) for x in a]
    lo, hi = kappa_interval(a, b, n_resamples=500, seed=42)
    assert lo < weighted_kappa(a, b) < hi
    assert (lo, hi) == kappa_interval(a, b, n_resamples=500, seed=42)


def test_ratings_csv_and_cli(tmp_path, capsys):
    path = tmp_path / "ratings.csv"
    path.write_text("item,author,second,judge\n1,2,2,2\n2,1,2,1\n3,0,0,1\n4,2,,2\n5,2,1,2\n")
    ratings = read_ratings(path)
    assert ratings["second"] == [2, 2, 0, None, 1]
    rows = agreement_table(ratings, n_resamples=200)
    assert [r.pair for r in rows] == ["author vs second", "author vs judge", "second vs judge"]
    assert rows[0].n == 4 and rows[1].n == 5
    assert rows[1].exact == pytest.approx(0.8) and rows[1].within_one == 1.0
    assert main(["judge-agreement", "--ratings", str(path), "--n-resamples", "200"]) == 0
    assert "author vs judge" in capsys.readouterr().out
    path.write_text("item,author,judge\n1,2,3\n")
    assert main(["judge-agreement", "--ratings", str(path)]) == 2
    assert "line 2: item 1: field judge: '3' is not a rating" in capsys.readouterr().err
