"""What the viewer shows, gathered from a runs folder and a scores folder.

Cases are the scored ones: the scores say which cases a run was judged on
(absent cases included, as failures), and each is paired with its transcript
record when the run file holds it. Run files are found as
``RUNS/<model>/<system>.jsonl`` (our transcripts) or ``.json`` (the reference's
result files); the folder name is the model, as in the workflow's layout.
Records that carry no conversation (the reference's, an old rule-agent transcript's) get the
system prompt and user turns rebuilt from the case when the benchmark data is
at hand, marked as rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from metrobench.errors import MetrobenchError
from metrobench.scoring.metrics import CaseTotals, Component, case_totals
from metrobench.transcripts.records import CaseRecord, read_run
from metrobench.transcripts.system_files import system_transcripts
from metrobench.vocabulary import WHOLE_IN_REPORTS, is_whole


@dataclass(frozen=True)
class ScoreRow:
    """One component of one case, as stored in the Parquet scores."""

    component: str
    tier: int
    score: float | None  # None: a judged component left unjudged
    max: float
    judged: bool
    reason: str

    @property
    def failed(self) -> bool:
        """Scored below its maximum (an unjudged component is not called failed)."""
        return self.score is not None and self.score < self.max


@dataclass
class CaseResult:
    """One case of one model: its scores, its record (if the run has it) and its totals."""

    model: str
    system: str
    case_id: str
    category: str
    partition: str
    components: list[ScoreRow]
    error: str | None = None
    record: CaseRecord | None = None
    rebuilt: list[dict[str, Any]] = field(default_factory=list)  # messages rebuilt from the case
    title: str = ""

    @cached_property
    def totals(self) -> CaseTotals:
        """The reference's per-case totals (unjudged components at 0: the low bound ``summary`` shows)."""
        return case_totals(self.case_id, self.system,
                           [Component(c.component, c.tier, c.score, c.max) for c in self.components])

    @property
    def tier1_pct(self) -> float:
        return self.totals.tier1_pct

    @property
    def composite_pct(self) -> float:
        return self.totals.pct

    @property
    def failed(self) -> list[str]:
        return [c.component for c in self.components if c.failed]


def load_scores(scores: Path, models: list[str] | None, partition: str = WHOLE_IN_REPORTS) -> list[CaseResult]:
    """Every scored case of the chosen models, in storage order (cases in case-file order)."""
    from metrobench.scoring.store import read_scores

    table = read_scores(Path(scores))
    found = set(table.column("model").to_pylist())
    missing = [m for m in models or [] if m not in found]
    if missing:
        raise MetrobenchError(f"{scores}: no scores of model {', '.join(missing)} "
                              f"(scored: {', '.join(sorted(found))})")
    cols = table.to_pydict()
    wanted = set(models or found)
    views: dict[tuple[str, str, str], CaseResult] = {}
    for i in range(table.num_rows):
        if cols["model"][i] not in wanted or (not is_whole(partition) and cols["partition"][i] != partition):
            continue
        key = (cols["model"][i], cols["system"][i], cols["case_id"][i])
        view = views.get(key)
        if view is None:
            view = views[key] = CaseResult(*key, category=cols["category"][i],
                                         partition=cols["partition"][i], components=[],
                                         error=cols["error"][i])
        view.components.append(ScoreRow(cols["component"][i], int(cols["tier"][i]), cols["score"][i],
                                         float(cols["max"][i]), bool(cols["judged"][i]),
                                         cols["reason"][i] or ""))
    return list(views.values())


def run_files(runs: Path) -> dict[tuple[str, str], Path]:
    """(model, system) -> run file under ``RUNS/<model>/``; a transcript wins over a result JSON.

    Only the known systems' files count (:func:`~metrobench.transcripts.system_files.system_transcripts`):
    a set-aside ``<system>.<fingerprint>.jsonl`` beside a view is not a system.
    One model's views directly in ``RUNS`` (``RUNS/<system>.jsonl``, as ``metrobench eval`` cuts them
    into ``results/eval/<model>/runs/``) count too: the model is the one the transcript's header names,
    else the folder above ``RUNS``."""
    runs = Path(runs)
    if not runs.is_dir():
        raise MetrobenchError(f"{runs}: no runs folder (expected {runs}/<model>/<system>.jsonl)")
    found: dict[tuple[str, str], Path] = {}
    for system, path in system_transcripts(runs):
        found[(_header_model(path) or runs.resolve().parent.name, system)] = path
    for folder in sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for suffix in (".json", ".jsonl"):  # later suffix overrides the earlier
            for system, path in system_transcripts(folder, suffix):
                found[(folder.name, system)] = path
    return found


def _header_model(path: Path) -> str | None:
    """The model a transcript's header line names (None: no header, an old transcript)."""
    import json

    with path.open("rb") as f:
        line = f.readline()
    try:
        header = json.loads(line).get("header")
    except (ValueError, AttributeError):
        return None
    model = header.get("model") if isinstance(header, dict) else None
    return model if isinstance(model, str) and model else None


def attach_records(views: list[CaseResult], runs: Path) -> int:
    """Pair each case with its record from the run files; returns how many were found."""
    files = run_files(runs)
    records: dict[tuple[str, str], dict[str, CaseRecord]] = {}
    attached = 0
    for view in views:
        key = (view.model, view.system)
        if key not in records:
            path = files.get(key)
            records[key] = {r.case_id: r for r in read_run(path).records} if path else {}
        view.record = records[key].get(view.case_id)
        attached += view.record is not None
    return attached


def rebuild_conversations(views: list[CaseResult], data: str | Path | None) -> None:
    """Case titles, and system prompt + user turns for records without messages (data permitting)."""
    from metrobench.data import Benchmark
    from metrobench.agents.prompts import system_prompt, user_turns

    bench = Benchmark.open(data)
    systems: dict[str, Any] = {}
    cases: dict[str, dict[str, Any]] = {}
    for view in views:
        if view.system not in cases:
            cases[view.system] = {c.id: c for c in bench.cases(view.system)}
        case = cases[view.system].get(view.case_id)
        if case is None:
            continue
        view.title = case.title
        if view.record is not None and view.record.messages:
            continue
        if view.system not in systems:
            systems[view.system] = bench.system(view.system)
        context = case.raw.get("system_context", {})
        view.rebuilt = [{"role": "system", "content": system_prompt(systems[view.system], context)}]
        view.rebuilt += [{"role": "user", "content": text} for text in user_turns(case.raw)]
