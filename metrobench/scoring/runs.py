"""Scoring run files end to end: one path from a transcript to its scores.

The run says which model, system and cases it stands for (:func:`check_run_model`: a
transcript whose records name another model than ``--model`` is refused;
:func:`metrobench.transcripts.selection.run_system`, :func:`selection_to_score`),
the data resolves those cases, the scorer scores them, and the store writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metrobench.data.loader import Benchmark
from metrobench.data.partition import load_split
from metrobench.errors import MetrobenchError
from metrobench.scoring.judge import Judge
from metrobench.scoring.names import check_name
from metrobench.scoring.scorer import CaseScore, Scorer
from metrobench.scoring.store import write_scores
from metrobench.transcripts.records import MISSING, Run, read_run
from metrobench.transcripts.selection import run_system, selection_to_score


@dataclass
class ScoredRun:
    model: str
    system: str
    path: Path | None   # the Parquet file, once written
    scores: list[CaseScore]

    @property
    def missing(self) -> int:
        return sum(1 for s in self.scores if s.error == MISSING)


def check_run_model(run: Run, model: str | None) -> None:
    """Refuse to score a transcript under another model than its records name (``--model m`` on the
    run of ``m-rep2``: its scores would stand in for another run's). Records that name no model
    (a reference result file's, whose model is the file's metadata, or a foreign transcript's)
    take ``--model`` as given. Without ``--model`` the records must name one model between them."""
    if run.kind != "transcript":
        return
    if model is None:  # scored under the records' own name: they must agree on one
        names = sorted({r.model for r in run.records if r.model})
        if len(names) > 1:
            raise MetrobenchError(f"{run.path}: the run's records are of {len(names)} models ({', '.join(names)}); "
                                  "a run file holds one model's cases: write each model's to its own file")
        return
    named = sorted({r.model for r in run.records if r.model and r.model != model})
    if named:
        raise MetrobenchError(f"{run.path}: the run's records are of model {', '.join(named)}, not {model} "
                              f"(--model); score it under its own name, or omit --model")


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
    partitions = partitions if partitions is not None else load_split(bench, None)
    # the run (transcripts): its system and the selection it stands for; its cases (data); its scores
    run = read_run(run_path)
    system = run_system(run, system)
    wanted = selection_to_score(run, system, selection, sample, partitions)
    cases = wanted.resolve(bench, partitions)
    if not (model or run.model):
        raise MetrobenchError(f"{run.path}: the run names no model; give one with --model")
    check_run_model(run, model)
    name = check_name("model", model or run.model)
    scorer = Scorer(bench.system(system), errata=errata, judge=judge)
    scores = scorer.score([c.raw for c in cases], run.records, model=name, warn=warn, source=str(run.path))
    return ScoredRun(name, system, None, scores)
