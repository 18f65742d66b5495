"""Scoring run files end to end: which system and model, which cases, where the rows go.

A run's records say which system they belong to (their ``system`` field, else
their case-id prefix). An explicit ``--system`` that disagrees with them is
refused before anything is written: scoring a doha run as marta would
otherwise replace marta's real scores with a file of "missing" cases.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metrobench.data.loader import Benchmark
from metrobench.data.models import Case
from metrobench.data.root import SYSTEM_BY_PREFIX, SYSTEMS
from metrobench.errors import MetrobenchError
from metrobench.data.partition import load_split
from metrobench.scoring.judge import Judge
from metrobench.scoring.scorer import CaseScore, Scorer
from metrobench.scoring.names import check_name
from metrobench.scoring.store import write_scores
from metrobench.data.selection import Selection, split_digest
from metrobench.transcripts.selection import overridden, recorded_selection
from metrobench.transcripts.records import MISSING, Run, read_run
from metrobench.vocabulary import WHOLE

def record_systems(run: Run) -> Counter:
    """How many records of ``run`` belong to each system (by field, else by case-id prefix)."""
    found: Counter = Counter()
    for record in run.records:
        system = record.system or SYSTEM_BY_PREFIX.get(record.case_id.split("-")[0], "")
        if system:
            found[system] += 1
    return found


def infer_system(run: Run, explicit: str | None) -> str:
    if explicit:
        system = explicit
        others = {s: n for s, n in record_systems(run).items() if s != explicit}
        if others:
            listed = ", ".join(f"{n} {s}" for s, n in sorted(others.items()))
            raise MetrobenchError(f"{run.path}: --system {explicit}, but the run holds {listed} case records; "
                                  "score it under its own system (omit --system)")
    elif run.system:
        system = run.system
    else:
        prefixes = Counter(r.case_id.split("-")[0] for r in run.records)
        if not prefixes:
            raise MetrobenchError(f"{run.path}: empty run; name its system with --system")
        system = SYSTEM_BY_PREFIX.get(prefixes.most_common(1)[0][0], "")
    if system not in SYSTEMS:
        raise MetrobenchError(f"{run.path}: unknown system {system!r}; use one of {', '.join(SYSTEMS)}")
    return system


def _cases_of(bench: Benchmark, run: Run, system: str, selection: str | None, sample: int | None,
              partitions: dict[str, str]) -> list[Case]:
    """The cases a run should hold: its recorded selection, else the flags'."""
    recorded = recorded_selection(run)
    if recorded is not None and recorded.system != system:
        raise MetrobenchError(f"{run.path}: the run's cases were chosen from {recorded.system}, not {system}")
    split = split_digest(partitions)
    if recorded is not None and not overridden(recorded, selection, sample, split, str(run.path)):
        return recorded.resolve(bench, partitions)
    # the flags, each one not given taken from the run's record (else the whole system)
    flags = Selection(system=system, partition=selection or (recorded.partition if recorded else WHOLE),
                      split=split, sample=sample if sample is not None else (recorded.sample if recorded else None))
    return flags.resolve(bench, partitions)


@dataclass
class ScoredRun:
    model: str
    system: str
    path: Path | None   # the Parquet file, once written
    scores: list[CaseScore]

    @property
    def missing(self) -> int:
        return sum(1 for s in self.scores if s.error == MISSING)


def score_run_file(bench: Benchmark, run_path: Path | str, out: Path, *, judge: Judge | None,
                   errata: frozenset[str] = frozenset(), selection: str | None = None,
                   partitions: dict[str, str] | None = None, model: str | None = None,
                   system: str | None = None, warn: Any = None, sample: int | None = None) -> ScoredRun:
    """Score one run file (our transcript or a reference result) into ``out``: :func:`score_run`, then Parquet."""
    partitions = partitions if partitions is not None else load_split(bench, None)
    scored = score_run(bench, run_path, judge=judge, errata=errata, selection=selection, partitions=partitions,
                       model=model, system=system, warn=warn, sample=sample)
    scored.path = write_scores(out, scored.model, scored.system, scored.scores, partitions)
    return scored


def score_run(bench: Benchmark, run_path: Path | str, *, judge: Judge | None,
              errata: frozenset[str] = frozenset(), selection: str | None = None,
              partitions: dict[str, str] | None = None, model: str | None = None,
              system: str | None = None, warn: Any = None, sample: int | None = None) -> ScoredRun:
    """Score one run file (our transcript or a reference result): the one scoring path of every command.

    The cases are those the run recorded (:mod:`metrobench.transcripts.selection`), else
    ``selection`` (partition; default all) and ``sample``.
    """
    run = read_run(run_path)
    system = infer_system(run, system)
    if not (model or run.model):
        raise MetrobenchError(f"{run.path}: the run names no model; give one with --model")
    name = check_name("model", model or run.model)
    partitions = partitions if partitions is not None else load_split(bench, None)
    cases = _cases_of(bench, run, system, selection, sample, partitions)
    scorer = Scorer(bench.system(system), errata=errata, judge=judge)
    scores = scorer.score([c.raw for c in cases], run.records, model=name, warn=warn)
    return ScoredRun(name, system, None, scores)
