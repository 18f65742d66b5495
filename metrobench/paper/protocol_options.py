"""What each protocol option changed, per row: the runner's robustness measured as the errata are.

A model run with protocol options (:mod:`metrobench.agents.runner.protocol`) records on each
case every point where an option changed its course (``meta["protocol"]``: the round, the
option and how many tool calls the case had made by then). At that point the reference's
runner would have ended the case, so the case as the paper's protocol would have recorded it
is known exactly for a deterministic model (temperature 0; else as far as one sample can tell):

* ``retry`` and ``argument_feedback`` — an error there (response null), the calls made
  before it kept;
* ``tool_parser`` — a plain-text ending there: the reply's text (kept in
  ``meta["text_tool_replies"]``) as ``raw_content``, its JSON as the response if it is JSON.

Per row: its options, the cases each option changed (and any), and the Tier 1 of its recorded
cases (the view's: held-out in the paper config) as run, without each option (that option's
interventions undone, the others kept) and under the paper's protocol (all undone), judge off,
as the errata table scores. A row run under the paper's protocol has no intervention, and its
figures are its own. ``metrobench protocol-options`` writes it; the workflow's
``results/protocol_options.csv`` reads the protocol table's runs. The test that holds it: the same
scripted endpoint run with every option and under the paper's protocol, the first's table
undone gives the second's Tier 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from metrobench.agents.runner.protocol import OPTIONS, Protocol
from metrobench.data.loader import Benchmark
from metrobench.data.root import SYSTEMS
from metrobench.errors import MetrobenchError
from metrobench.scoring.metrics import headline
from metrobench.scoring.scorer import Scorer
from metrobench.transcripts.records import CaseRecord, latest_records, read_run

COLUMNS = ("model", "options", "cases", *(f"{name}_cases" for name in OPTIONS), "changed_cases",
           "tier1", *(f"tier1_without_{name}" for name in OPTIONS), "tier1_paper_protocol")


def interventions(record: CaseRecord, options: Iterable[str]) -> list[dict[str, Any]]:
    """The points where one of ``options`` changed the case's course, in the order they happened."""
    wanted = set(options)
    return [step for step in record.meta.get("protocol") or []
            if isinstance(step, dict) and step.get("option") in wanted]


def as_the_reference(record: CaseRecord, options: Iterable[str]) -> CaseRecord:
    """The record as the case would have ended had ``options`` been off: at their first intervention."""
    steps = interventions(record, options)
    if not steps:
        return record
    step = steps[0]
    calls = record.tool_calls_made[:int(step.get("calls_before", len(record.tool_calls_made)))]
    ended = replace(record, tool_calls_made=calls, response=None, raw_content="", reasoning_content="",
                    meta={**record.meta, "ending": "as_the_reference"})
    if step["option"] == "tool_parser":  # the reply was a plain-text ending
        text = next((reply.get("content") or "" for reply in record.meta.get("text_tool_replies") or []
                     if reply.get("round") == step.get("round")), "")
        try:
            response = json.loads(text)
        except json.JSONDecodeError:
            response = None
        return replace(ended, response=response, raw_content=text, error=None)
    return replace(ended, error=f"{step['option']}: the reference's runner ended the case on round {step['round']}")


def options_of(records: Sequence[CaseRecord]) -> str:
    """The protocol a row's records were run with, in words (``paper`` for none)."""
    seen: set[str] = set()
    for record in records:
        recorded = (record.meta.get("settings") or {}).get("protocol")
        if isinstance(recorded, dict):
            seen.update(Protocol.model_validate(recorded).options())
    return ", ".join(sorted(seen)) or "paper"


def _tier1(bench: Benchmark, by_system: dict[str, list[CaseRecord]], cases: dict[str, list[dict]]) -> float:
    totals = {}
    for system, records in by_system.items():
        scored = Scorer(bench.system(system)).score(cases[system], records, warn=lambda _: None)
        totals[system] = [s.totals(system) for s in scored]
    return round(headline(totals).tier1, 2)


def options_row(bench: Benchmark, model: str, runs: Path) -> dict[str, Any]:
    """One model's row (the module docstring), from its transcripts ``<runs>/<model>/<system>.jsonl``."""
    by_system: dict[str, list[CaseRecord]] = {}
    for system in SYSTEMS:
        path = Path(runs) / model / f"{system}.jsonl"
        if path.is_file():
            latest, _ = latest_records(read_run(path).records)
            by_system[system] = list(latest.values())
    records = [r for rs in by_system.values() for r in rs]
    if not records:
        raise MetrobenchError(f"{Path(runs) / model}: no transcripts")
    wanted = {r.case_id for r in records}
    cases = {system: [c.raw for c in bench.cases(system) if c.id in wanted] for system in by_system}
    row: dict[str, Any] = {"model": model, "options": options_of(records), "cases": len(records)}
    for name in OPTIONS:
        row[f"{name}_cases"] = sum(bool(interventions(r, [name])) for r in records)
    row["changed_cases"] = sum(bool(interventions(r, OPTIONS)) for r in records)
    row["tier1"] = _tier1(bench, by_system, cases)
    for name in OPTIONS:
        row[f"tier1_without_{name}"] = (
            row["tier1"] if not row[f"{name}_cases"] else
            _tier1(bench, {s: [as_the_reference(r, [name]) for r in rs] for s, rs in by_system.items()}, cases))
    row["tier1_paper_protocol"] = (
        row["tier1"] if not row["changed_cases"] else
        _tier1(bench, {s: [as_the_reference(r, OPTIONS) for r in rs] for s, rs in by_system.items()}, cases))
    return row


def options_table(bench: Benchmark, runs: Path, models: Sequence[str]) -> pd.DataFrame:
    """One row a model (:func:`options_row`), in the order given."""
    return pd.DataFrame([options_row(bench, model, runs) for model in models], columns=list(COLUMNS))
