"""Rater agreement on ordinal 0/1/2 judgments: how the judge was calibrated (paper Table 1).

Given a CSV with one row per rated item (a case x rubric pair) and one column
per rater, every pair of raters gets: exact agreement, agreement within one
point, quadratic-weighted Cohen's kappa with a percentile bootstrap interval
over items, and Gwet's AC2 with the same quadratic weights. AC2 stays
informative where kappa collapses because nearly every rating is a 2 (the
"kappa paradox" the paper's Table 1 shows).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from metrobench.errors import MetrobenchError

CATEGORIES = (0, 1, 2)


def _weights(k: int) -> list[list[float]]:
    """Quadratic agreement weights: 1 on the diagonal, 0 at the far corners."""
    return [[1 - (i - j) ** 2 / (k - 1) ** 2 for j in range(k)] for i in range(k)]


def _table(a: Sequence[int], b: Sequence[int], k: int) -> list[list[float]]:
    counts = [[0.0] * k for _ in range(k)]
    for x, y in zip(a, b):
        counts[x][y] += 1
    n = len(a)
    return [[c / n for c in row] for row in counts]


def weighted_kappa(a: Sequence[int], b: Sequence[int], k: int = 3) -> float:
    """Cohen's kappa with quadratic weights; NaN when chance disagreement is zero."""
    p = _table(a, b, k)
    rows = [sum(r) for r in p]
    cols = [sum(p[i][j] for i in range(k)) for j in range(k)]
    w = _weights(k)
    observed = sum((1 - w[i][j]) * p[i][j] for i in range(k) for j in range(k))
    expected = sum((1 - w[i][j]) * rows[i] * cols[j] for i in range(k) for j in range(k))
    return 1 - observed / expected if expected > 0 else math.nan


def gwet_ac2(a: Sequence[int], b: Sequence[int], k: int = 3) -> float:
    """Gwet's AC2 for two raters with quadratic weights."""
    p = _table(a, b, k)
    w = _weights(k)
    pa = sum(w[i][j] * p[i][j] for i in range(k) for j in range(k))
    pi = [(sum(p[c]) + sum(p[r][c] for r in range(k))) / 2 for c in range(k)]
    tw = sum(map(sum, w))
    pe = tw / (k * (k - 1)) * sum(x * (1 - x) for x in pi)
    return (pa - pe) / (1 - pe) if pe < 1 else math.nan


def _percentile(sorted_values: Sequence[float], p: float) -> float:
    index = int(round(p / 100 * (len(sorted_values) - 1)))
    return sorted_values[max(0, min(len(sorted_values) - 1, index))]


def kappa_interval(a: Sequence[int], b: Sequence[int], *, n_resamples: int = 2000,
                   seed: int = 42) -> tuple[float, float]:
    """95% percentile bootstrap interval of weighted kappa, resampling items."""
    rng = random.Random(seed)
    n = len(a)
    values = []
    for _ in range(n_resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        value = weighted_kappa([a[i] for i in idx], [b[i] for i in idx])
        if not math.isnan(value):
            values.append(value)
    if not values:
        return math.nan, math.nan
    values.sort()
    return _percentile(values, 2.5), _percentile(values, 97.5)


@dataclass(frozen=True)
class Agreement:
    pair: str
    n: int
    exact: float
    within_one: float
    kappa: float
    kappa_lo: float
    kappa_hi: float
    ac2: float


def agreement(name: str, a: Sequence[int], b: Sequence[int], *, n_resamples: int = 2000,
              seed: int = 42) -> Agreement:
    n = len(a)
    lo, hi = kappa_interval(a, b, n_resamples=n_resamples, seed=seed)
    return Agreement(name, n, sum(x == y for x, y in zip(a, b)) / n,
                     sum(abs(x - y) <= 1 for x, y in zip(a, b)) / n,
                     weighted_kappa(a, b), lo, hi, gwet_ac2(a, b))


def read_ratings(path: Path) -> dict[str, list[int | None]]:
    """rater -> ratings in row order; the first column identifies the item. Blank = not rated."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise MetrobenchError(f"{path}: no such ratings file") from None
    if len(rows) < 2 or len(rows[0]) < 3:
        raise MetrobenchError(f"{path}: need a header (item, rater, rater, ...) and at least one row")
    raters = rows[0][1:]
    out: dict[str, list[int | None]] = {r: [] for r in raters}
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(rows[0]):
            raise MetrobenchError(f"{path}: line {line}: {len(row)} fields, header has {len(rows[0])}")
        for rater, value in zip(raters, row[1:]):
            value = value.strip()
            if value == "":
                out[rater].append(None)
            elif value in ("0", "1", "2"):
                out[rater].append(int(value))
            else:
                raise MetrobenchError(f"{path}: line {line}: item {row[0]}: field {rater}: "
                                      f"{value!r} is not a rating (0, 1 or 2)")
    return out


def agreement_table(ratings: dict[str, list[int | None]], *, n_resamples: int = 2000,
                    seed: int = 42) -> list[Agreement]:
    """Every pair of raters, over the items both rated."""
    out = []
    for first, second in combinations(ratings, 2):
        pairs = [(x, y) for x, y in zip(ratings[first], ratings[second])
                 if x is not None and y is not None]
        if not pairs:
            continue
        a, b = [x for x, _ in pairs], [y for _, y in pairs]
        out.append(agreement(f"{first} vs {second}", a, b, n_resamples=n_resamples, seed=seed))
    return out
