"""How models use the kiosk protocol, from their transcripts: one row per model.

Per model, over its recorded cases (every ``<runs>/<model>/<system>.jsonl`` transcript of a known
system, :func:`~metrobench.transcripts.system_files.system_transcripts`: set-asides beside them are not read):

* ``executed_call_pct``: cases with at least one executed tool call (the tool ran,
  whatever it answered, a 422 included; arguments that could not be read do not count);
* ``accepted_pct``: cases with a submission the kiosk accepted;
* ``mean_rounds``: model rounds a case (0 for the rule agent, which has none);
* endings by kind: ``ended_pct`` (no error), ``model_error_pct`` (round budget, token
  limit, empty replies, a request the endpoint refused), ``context_error_pct`` (the
  conversation outgrew the server's context: the serving configuration's limit, not an
  answer of the model's) and ``infrastructure_error_pct`` (the endpoint failed), the kind
  as :func:`metrobench.transcripts.records.ending_kind` reads or derives it (``model`` for
  a failure a transcript does not mark, ``context`` for a 400 whose body says so).

So "student > base" in Tier 1 can be read next to "the student finishes the task".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metrobench.errors import MetrobenchError
from metrobench.transcripts.records import CONTEXT, INFRASTRUCTURE, CaseRecord, ending_kind, read_run
from metrobench.transcripts.system_files import system_transcripts
from metrobench.vocabulary import SUBMIT_TOOL

#: Errors the runner gives a call it could not run (loop.parse_arguments, tool_parsing).
UNREAD = ("arguments are not valid JSON", "arguments must be a JSON object", "tool call block is not valid JSON")
COLUMNS = ("model", "cases", "executed_call_pct", "accepted_pct", "mean_rounds", "ended_pct",
           "model_error_pct", "context_error_pct", "infrastructure_error_pct")


def executed(call: dict[str, Any]) -> bool:
    """The tool ran (its answer may be an error); a call whose arguments could not be read did not."""
    return not str(call.get("error") or "").startswith(UNREAD)


def accepted(record: CaseRecord) -> bool:
    """The kiosk accepted at least one of the case's submissions."""
    return any(c.get("name") == SUBMIT_TOOL and c.get("error") is None for c in record.tool_calls_made)


def model_records(runs: Path, model: str) -> list[CaseRecord]:
    """Every record of a model's system transcripts, systems in name order (set-asides left out)."""
    paths = [path for _, path in system_transcripts(Path(runs) / model)]
    if not paths:
        raise MetrobenchError(f"{Path(runs) / model}: no transcripts")
    return [r for path in paths for r in read_run(path).records]


def _pct(count: int, n: int) -> float:
    return round(100 * count / n, 1)


def protocol_row(model: str, records: list[CaseRecord]) -> dict[str, Any]:
    """One model's row (see the module docstring); ``records`` must not be empty."""
    n = len(records)
    failed = [r for r in records if r.error is not None]
    kinds = [ending_kind(r) for r in failed]
    infrastructure, context = kinds.count(INFRASTRUCTURE), kinds.count(CONTEXT)
    return {"model": model, "cases": n,
            "executed_call_pct": _pct(sum(any(executed(c) for c in r.tool_calls_made) for r in records), n),
            "accepted_pct": _pct(sum(accepted(r) for r in records), n),
            "mean_rounds": round(sum(r.api_rounds for r in records) / n, 2),
            "ended_pct": _pct(n - len(failed), n),
            "model_error_pct": _pct(len(failed) - infrastructure - context, n),
            "context_error_pct": _pct(context, n),
            "infrastructure_error_pct": _pct(infrastructure, n)}
