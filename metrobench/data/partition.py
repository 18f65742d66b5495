"""The train/held-out partition (reference spec §9.1).

A system-stratified 25 % held-out split at seed 42, with the 15 "gap-audit" cases
pinned to held-out. The draw uses CPython's ``random.Random`` (Mersenne Twister
and its Fisher–Yates ``shuffle``), one generator shared across systems in the
order marta, doha, bart, taipei, cta, beijing: that is what reproduces the
committed id lists, and no other generator would.

The written file has the committed split's fields except ``created_utc``, so a
rerun is byte-identical.
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metrobench.atomic import write_text
from metrobench.data.root import SPLIT_FILE, SYSTEMS
from metrobench.errors import MetrobenchError
from metrobench.vocabulary import CATEGORIES, SELECTIONS, WHOLE

if TYPE_CHECKING:  # at run time only where used: every command's parser imports SELECTIONS from here
    from metrobench.data.loader import Benchmark
    from metrobench.data.models import Case

PINNED_HOLDOUT: tuple[str, ...] = (
    "BART-B-016", "BART-F-016", "BJM-A-021", "BJM-B-016", "BJM-C-022", "CTA-C-018", "CTA-F-016",
    "DOHA-C-016", "DOHA-E-006", "DOHA-E-007", "MARTA-D-016", "MARTA-F-016", "MARTA-F-017",
    "TRTC-B-016", "TRTC-C-018",
)
SPEC_VERSION = "v23-holdout75-seed42"
#: The published split's settings: with them, the split must equal the committed split file.
PAPER_SEED, PAPER_FRAC = 42, 0.25


@dataclass(frozen=True)
class CaseKey:
    id: str
    system: str
    category: str
    od: tuple[str, str] | None


def case_key(case: Case) -> CaseKey:
    """Id, system, category and origin–destination pair (first origin/destination station ids)."""
    from metrobench.data.models import StationSelected

    origin = destination = None
    seen_origin = seen_destination = False
    for event in case.events:
        if isinstance(event, StationSelected):
            if event.field == "origin" and not seen_origin:
                origin, seen_origin = event.station_id, True
            elif event.field == "destination" and not seen_destination:
                destination, seen_destination = event.station_id, True
    od = (origin, destination) if origin and destination else None
    return CaseKey(case.id, case.system, case.category, od)


def _pct(part: int, whole: int) -> float:
    return round(100 * part / whole, 2) if whole else 0.0


def _overlap_stats(xs: list[int]) -> dict[str, int]:
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return {"n": 0, "with_zero_neighbors": 0, "with_one_or_more": 0, "median": 0, "p90": 0, "max": 0}
    return {
        "n": n,
        "with_zero_neighbors": sum(1 for x in xs if x == 0),
        "with_one_or_more": sum(1 for x in xs if x > 0),
        "median": xs[n // 2],
        "p90": xs[min(n - 1, int(0.9 * n))],
        "max": xs[-1],
    }


def build_partition(keys: list[CaseKey], *, seed: int = PAPER_SEED, frac: float = PAPER_FRAC,
                    pinned: tuple[str, ...] = PINNED_HOLDOUT, expected_total: int | None = 955,
                    warn=lambda msg: print(msg, file=sys.stderr)) -> dict[str, Any]:
    """Draw the split and assemble the partition document (no timestamp)."""
    ids = {k.id for k in keys}
    missing = [p for p in pinned if p not in ids]
    if missing:
        raise MetrobenchError(f"pinned held-out case(s) not in the case files: {', '.join(missing)}")
    if expected_total is not None and len(keys) != expected_total:
        raise MetrobenchError(f"expected {expected_total} cases, found {len(keys)}")

    rng = random.Random(seed)
    pinned_set = set(pinned)
    holdout: set[str] = set()
    for system in SYSTEMS:
        members = [k for k in keys if k.system == system]
        target = round(frac * len(members))
        pinned_here = [k.id for k in members if k.id in pinned_set]
        free = sorted(k.id for k in members if k.id not in pinned_set)
        rng.shuffle(free)
        holdout.update(pinned_here)
        holdout.update(free[:max(0, target - len(pinned_here))])
    train = ids - holdout

    _check_invariants(keys, train, holdout, pinned_set)

    def summary(members: list[str]) -> dict[str, Any]:
        n_hold = sum(1 for i in members if i in holdout)
        return {WHOLE: len(members), "train": len(members) - n_hold, "holdout": n_hold,
                "pct_holdout": _pct(n_hold, len(members))}

    per_system = {s: summary([k.id for k in keys if k.system == s]) for s in SYSTEMS}
    per_category = {c: summary([k.id for k in keys if k.category == c]) for c in CATEGORIES}
    per_cell: dict[str, dict[str, dict[str, int]]] = {}
    for system in SYSTEMS:
        per_cell[system] = {}
        for cat in CATEGORIES:
            cell = [k.id for k in keys if k.system == system and k.category == cat]
            n_hold = sum(1 for i in cell if i in holdout)
            per_cell[system][cat] = {"train": len(cell) - n_hold, "holdout": n_hold}
            if len(cell) < 5:
                warn(f"partition: cell {system}/{cat} has only {len(cell)} cases")
            elif not 0.10 <= n_hold / len(cell) <= 0.50:
                warn(f"partition: cell {system}/{cat} held-out fraction {n_hold / len(cell):.2f} "
                     "outside [0.10, 0.50]")

    return {
        "spec_version": SPEC_VERSION if (seed, frac) == (42, 0.25) else f"holdout-seed{seed}-frac{frac}",
        "seed": seed,
        "frac_holdout": frac,
        "stratify_by": "system",
        "totals": {WHOLE: len(keys), "train": len(train), "holdout": len(holdout)},
        "per_system": per_system,
        "per_category": per_category,
        "per_cell": per_cell,
        "pinned_gap_audit": sorted(pinned),
        "train_ids": sorted(train),
        "holdout_ids": sorted(holdout),
        "template_overlap_report": _overlap_report(keys, train, holdout),
    }


def _check_invariants(keys: list[CaseKey], train: set[str], holdout: set[str],
                      pinned: set[str]) -> None:
    ids = {k.id for k in keys}
    if train | holdout != ids or train & holdout:
        raise MetrobenchError("partition: train and held-out must be disjoint and cover every case")
    overall = len(holdout) / len(ids)
    if not 0.24 <= overall <= 0.27:
        raise MetrobenchError(f"partition: held-out fraction {overall:.3f} outside [0.24, 0.27]")
    if not pinned <= holdout:
        raise MetrobenchError("partition: a pinned case is not held out")
    for system in SYSTEMS:
        members = [k.id for k in keys if k.system == system]
        if members:
            frac = sum(1 for i in members if i in holdout) / len(members)
            if not 0.22 <= frac <= 0.28:
                raise MetrobenchError(f"partition: {system} held-out fraction {frac:.3f} "
                                      "outside [0.22, 0.28]")


def _overlap_report(keys: list[CaseKey], train: set[str], holdout: set[str]) -> dict[str, Any]:
    """How many training cases share each held-out case's origin–destination pair."""
    train_pairs = Counter((k.system, k.od) for k in keys if k.id in train and k.od)
    counts: dict[str, list[int]] = {system: [] for system in SYSTEMS}
    without = 0
    for k in sorted((k for k in keys if k.id in holdout), key=lambda k: k.id):
        if k.od is None:
            without += 1
        else:
            counts[k.system].append(train_pairs[(k.system, k.od)])
    everything = [x for system in SYSTEMS for x in counts[system]]
    return {
        "summary": {"holdout_cases_without_OD_pair": without, **_overlap_stats(everything)},
        "by_system": {system: _overlap_stats(counts[system]) for system in SYSTEMS},
    }


def partition_benchmark(bench: Benchmark, **kwargs: Any) -> dict[str, Any]:
    keys = [case_key(case) for system in SYSTEMS for case in bench.cases(system)]
    return build_partition(keys, **kwargs)


def committed_split(bench: Benchmark) -> dict[str, Any]:
    return json.loads((bench.root / SPLIT_FILE).read_text())


def write_partition(document: dict[str, Any], out: Path) -> None:
    """Write atomically (:mod:`metrobench.atomic`), 2-space indent, trailing newline."""
    write_text(out, json.dumps(document, indent=2) + "\n")


def partition_of(document: dict[str, Any]) -> dict[str, str]:
    """case id -> ``train`` or ``holdout``."""
    out = {cid: "train" for cid in document["train_ids"]}
    out.update({cid: "holdout" for cid in document["holdout_ids"]})
    return out


def load_split(bench: Benchmark, split: Path | str | None = None) -> dict[str, str]:
    """case id -> partition, from a split file (default: the benchmark's committed split)."""
    if split is None:
        return partition_of(committed_split(bench))
    path = Path(split)
    try:
        document = json.loads(path.read_text())
        return partition_of(document)
    except FileNotFoundError:
        raise MetrobenchError(f"{path}: no such split file") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise MetrobenchError(f"{path}: not a split file with train_ids and holdout_ids ({exc})") from None


def select_cases(bench: Benchmark, system: str, selection: str,
                 partitions: dict[str, str]) -> list[Case]:
    """The cases of ``system`` in ``selection`` (all, train or holdout), in case-file order."""
    if selection not in SELECTIONS:
        raise MetrobenchError(f"unknown partition {selection!r}: use {', '.join(SELECTIONS)}")
    cases = bench.cases(system)
    return cases if selection == WHOLE else [c for c in cases if partitions.get(c.id) == selection]


def sample_cases(cases: list[Case], n: int, system: str) -> list[Case]:
    """``n`` cases of ``system`` spread over the categories: round-robin, first case of each first.

    The category order is rotated by two places per system (in SYSTEMS order),
    so a small sample of the six systems together covers the categories; every
    stage that samples (runs and scoring) gets the same cases. Case-file order
    is kept in the result.
    """
    if n <= 0 or n >= len(cases):
        return list(cases)
    offset = 2 * SYSTEMS.index(system)
    by_category: dict[str, list[Case]] = {}
    for case in cases:
        by_category.setdefault(case.category, []).append(case)
    order = sorted(by_category)
    order = order[offset % len(order):] + order[:offset % len(order)]
    chosen: list[Case] = []
    depth = 0
    while len(chosen) < n:
        for category in order:
            if depth < len(by_category[category]) and len(chosen) < n:
                chosen.append(by_category[category][depth])
        depth += 1
    keep = {c.id for c in chosen}
    return [c for c in cases if c.id in keep]
