"""Bootstrap confidence intervals, paired comparisons, Holm-Bonferroni, seed spread (numpy).

Percentile intervals as the reference computes them (spec §10.2): sort the
resampled means and take index ``round(p/100 * (n-1))`` for p = 2.5 and 97.5.
The resampling uses numpy's PCG64 seeded once per statistic, so every
interval is the same in every process (the reference's two-seed intervals
depended on hash order). Two statistics:

* ``pooled`` — the mean over cases (the reference's bootstrap and per-category
  figures);
* ``headline`` — stratified by system: cases are resampled within each system
  and the statistic is the unweighted mean of the system means, i.e. the
  headline number of the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

DEFAULT_RESAMPLES = 5000
DEFAULT_SEED = 42


@dataclass(frozen=True)
class Interval:
    estimate: float
    lo: float
    hi: float
    n: int

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0


def percentile_index(n: int, p: float) -> int:
    return max(0, min(n - 1, int(round(p / 100 * (n - 1)))))


def _interval(stats: np.ndarray, estimate: float, n: int) -> Interval:
    ordered = np.sort(stats)
    return Interval(float(estimate), float(ordered[percentile_index(len(ordered), 2.5)]),
                    float(ordered[percentile_index(len(ordered), 97.5)]), n)


@lru_cache(maxsize=32)
def _indices(sizes: tuple[int, ...], n_resamples: int, seed: int) -> tuple[np.ndarray, ...]:
    """The resampling index matrices of one seed: the same for every model with these sizes.

    Drawing them once and reusing them is exactly what re-seeding per call would
    give, only faster (the paper matrix bootstraps 26 models over the same cases).
    """
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(0, k, size=(n_resamples, k)) for k in sizes)


def bootstrap(values: Sequence[float], *, n_resamples: int = DEFAULT_RESAMPLES,
              seed: int = DEFAULT_SEED) -> Interval:
    """Pooled mean with a percentile interval."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("bootstrap of no values")
    [index] = _indices((data.size,), n_resamples, seed)
    return _interval(data[index].mean(axis=1), data.mean(), data.size)


def bootstrap_stratified(groups: Sequence[Sequence[float]], *, n_resamples: int = DEFAULT_RESAMPLES,
                         seed: int = DEFAULT_SEED) -> Interval:
    """Mean of group means, resampling within each group (the headline statistic)."""
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not arrays:
        raise ValueError("bootstrap of no values")
    indices = _indices(tuple(a.size for a in arrays), n_resamples, seed)
    stats = np.mean([a[index].mean(axis=1) for a, index in zip(arrays, indices)], axis=0)
    estimate = float(np.mean([a.mean() for a in arrays]))
    return _interval(stats, estimate, sum(a.size for a in arrays))


def paired_bootstrap(a: dict[str, float], b: dict[str, float], *, n_resamples: int = DEFAULT_RESAMPLES,
                     seed: int = DEFAULT_SEED) -> tuple[Interval, float]:
    """Mean difference a - b over the cases both have (sorted ids), its interval and p-value."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("paired bootstrap with no common cases")
    diffs = np.array([a[c] - b[c] for c in common], dtype=float)
    [index] = _indices((diffs.size,), n_resamples, seed)
    means = diffs[index].mean(axis=1)
    return _interval(means, diffs.mean(), diffs.size), two_sided_p(means)


def two_sided_p(means: np.ndarray) -> float:
    """Bootstrap p-value of 'no difference': twice the smaller tail beyond zero, (k+1)/(n+1)."""
    n = len(means)
    below = (np.count_nonzero(means <= 0) + 1) / (n + 1)
    above = (np.count_nonzero(means >= 0) + 1) / (n + 1)
    return float(min(1.0, 2 * min(below, above)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def seed_spread(values: Sequence[float]) -> float:
    """Half the range across seeds (the paper's ± on the held-out table)."""
    return (max(values) - min(values)) / 2 if values else float("nan")


def seed_mean(per_seed: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per-case mean over seeds, over the cases every seed has (the paper's two-seed models)."""
    common = set.intersection(*(set(d) for d in per_seed)) if per_seed else set()
    return {c: sum(d[c] for d in per_seed) / len(per_seed) for c in sorted(common)}
