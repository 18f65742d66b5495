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

Repeated runs: where a model ran k times, its values are a matrix (a row per case, a
column per run) and each statistic resamples cases and runs together: the cases are
drawn as for one run (the same index matrices), then for each drawn case k of its runs
with replacement (a second stream of the same seed), so an interval includes the
run-to-run noise. The estimate is the mean over cases of each case's mean over its
runs. A one-column matrix is one run and gives exactly the one-run interval; so do k
identical runs, since the case draws are the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

DEFAULT_RESAMPLES = 5000
DEFAULT_SEED = 42
#: Resamples drawn at once for repeated runs (bounds the memory of the drawn runs).
CHUNK = 256
#: Per case, one value (one run) or one value per run (a row of the matrix).
Values = Sequence[float] | Sequence[Sequence[float]]


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


def _runs_matrix(values: Values) -> np.ndarray:
    """Values as floats: 1-D for one run (a one-column matrix too), else a (cases, runs) matrix."""
    data = np.asarray(values, dtype=float)
    if data.ndim == 2 and data.shape[1] == 1:
        return data[:, 0]
    if data.ndim not in (1, 2):
        raise ValueError("bootstrap values: one per case, or one row of runs per case")
    return data


def _repeat_stream(seed: int) -> np.random.Generator:
    """The runs' draws: a stream of the same seed apart from the cases' (which stay as for one run)."""
    return np.random.default_rng([seed, 1])


def _resampled_means(data: np.ndarray, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per resample (a row of ``index``), the mean over its drawn cases; a case of a runs matrix
    contributes the mean of k of its runs drawn with replacement."""
    if data.ndim == 1:
        return data[index].mean(axis=1)
    k = data.shape[1]
    out = np.empty(len(index))
    for start in range(0, len(index), CHUNK):
        rows = index[start:start + CHUNK]
        runs = rng.integers(0, k, size=(*rows.shape, k))
        out[start:start + CHUNK] = data[rows[..., None], runs].mean(axis=(1, 2))
    return out


def bootstrap(values: Values, *, n_resamples: int = DEFAULT_RESAMPLES,
              seed: int = DEFAULT_SEED) -> Interval:
    """Pooled mean with a percentile interval (a runs matrix: cases and runs resampled together)."""
    data = _runs_matrix(values)
    if data.size == 0:
        raise ValueError("bootstrap of no values")
    [index] = _indices((len(data),), n_resamples, seed)
    return _interval(_resampled_means(data, index, _repeat_stream(seed)), data.mean(), len(data))


def bootstrap_stratified(groups: Sequence[Values], *, n_resamples: int = DEFAULT_RESAMPLES,
                         seed: int = DEFAULT_SEED) -> Interval:
    """Mean of group means, resampling within each group (the headline statistic; runs matrices too)."""
    arrays = [_runs_matrix(g) for g in groups if len(g)]
    if not arrays:
        raise ValueError("bootstrap of no values")
    indices = _indices(tuple(len(a) for a in arrays), n_resamples, seed)
    rng = _repeat_stream(seed)
    stats = np.mean([_resampled_means(a, index, rng) for a, index in zip(arrays, indices)], axis=0)
    estimate = float(np.mean([a.mean() for a in arrays]))
    return _interval(stats, estimate, sum(len(a) for a in arrays))


def paired_bootstrap(a: Mapping[str, float | Sequence[float]], b: Mapping[str, float | Sequence[float]], *,
                     n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> tuple[Interval, float]:
    """Mean difference a - b over the cases both have (sorted ids), its interval and p-value.

    A case's value may be its runs (a model run k times): the same cases are drawn for both,
    and each drawn case's runs of each model are drawn again.
    """
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("paired bootstrap with no common cases")
    runs_a = _runs_matrix([np.atleast_1d(a[c]) for c in common])
    runs_b = _runs_matrix([np.atleast_1d(b[c]) for c in common])
    [index] = _indices((len(common),), n_resamples, seed)
    if runs_a.ndim == runs_b.ndim == 1:  # one run each: the differences, resampled
        diffs = runs_a - runs_b
        means = diffs[index].mean(axis=1)
        return _interval(means, diffs.mean(), diffs.size), two_sided_p(means)
    rng = _repeat_stream(seed)
    means = _resampled_means(runs_a, index, rng) - _resampled_means(runs_b, index, rng)
    return _interval(means, runs_a.mean() - runs_b.mean(), len(common)), two_sided_p(means)


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


def runs_by_case(per_run: Sequence[dict[str, float]]) -> dict[str, list[float]]:
    """Per case, its value in each run, over the cases every run has (sorted ids): a runs matrix's rows."""
    common = set.intersection(*(set(d) for d in per_run)) if per_run else set()
    return {c: [d[c] for d in per_run] for c in sorted(common)}


def seed_mean(per_seed: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per-case mean over seeds, over the cases every seed has (the paper's two-seed models)."""
    common = set.intersection(*(set(d) for d in per_seed)) if per_seed else set()
    return {c: sum(d[c] for d in per_seed) / len(per_seed) for c in sorted(common)}
