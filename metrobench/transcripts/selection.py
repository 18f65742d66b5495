"""Which cases a run covers, recorded in the run itself so that scoring reads it back.

A run's cases follow from its system, its partition (``all``, ``train`` or
``holdout``) under a split, and the narrowing options ``--sample N``,
``--cases`` and ``--limit``, applied in that order. ``run``, ``bench`` and
``rule-agent`` write that choice into every record they append
(``meta.selection``, with the split as a digest of its case -> partition map; a view also states
it in its header),
and ``score`` takes the cases from there: a case the run should hold but does
not is scored as a failure, and a case outside the selection is never mixed in.
An explicit ``--partition``/``--sample`` that names other cases wins with a
warning (a held-out run scored against all cases); a ``--split`` other than the
run's is refused, naming both digests. Runs without the record (reference result
files, transcripts from before it) are scored by the flags as before.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import TYPE_CHECKING

from metrobench.data.root import SYSTEM_BY_PREFIX, SYSTEMS
from metrobench.data.selection import Selection, split_digest
from metrobench.errors import MetrobenchError
from metrobench.vocabulary import WHOLE

if TYPE_CHECKING:
    from metrobench.transcripts.records import Run


def recorded_selection(run: Run) -> Selection | None:
    """The selection a run states: its header's (a view's) and its records' (``None`` if none does);
    an error if they disagree."""
    found = {json.dumps(r.meta["selection"], sort_keys=True) for r in run.records
             if isinstance(r.meta, dict) and r.meta.get("selection") is not None}
    if run.header is not None and run.header.selection is not None:
        found.add(json.dumps(run.header.selection, sort_keys=True))
    if not found:
        return None
    if len(found) > 1:
        raise MetrobenchError(f"{run.path}: its records were run with {len(found)} different case selections "
                              "(meta.selection); rerun with --restart, or write each to its own file")
    return Selection.from_meta(json.loads(found.pop()), str(run.path))


def overridden(recorded: Selection, partition: str | None, sample: int | None, split: str,
               where: str) -> bool:
    """Whether explicit ``--partition``/``--sample`` name other cases than the run was made for.

    They then win, with a warning: scoring a held-out run against all cases is a
    deliberate choice (the cases it lacks score as failures, and the summary says
    how many). A different split is an error: the run's partition labels would be wrong.
    """
    if recorded.split != split:
        raise MetrobenchError(f"{where}: the run's cases were chosen under another split (digest "
                              f"{recorded.split}) than --split gives ({split}); score it with the run's split")
    differs = []
    if partition is not None and partition != recorded.partition:
        differs.append(f"--partition {partition}")
    if sample is not None and sample != recorded.sample:
        differs.append(f"--sample {sample}")
    if differs:
        print(f"metrobench: warning: {where}: the run covers partition {recorded.partition}"
              f"{f', a sample of {recorded.sample}' if recorded.sample else ''}; scoring it as "
              f"{' '.join(differs)} (cases it lacks score as failures)", file=sys.stderr)
    return bool(differs)


def record_systems(run: Run) -> Counter:
    """How many records of ``run`` belong to each system (by field, else by case-id prefix)."""
    found: Counter = Counter()
    for record in run.records:
        system = record.system or SYSTEM_BY_PREFIX.get(record.case_id.split("-")[0], "")
        if system:
            found[system] += 1
    return found


def run_system(run: Run, explicit: str | None) -> str:
    """The system a run belongs to: ``explicit`` if the run agrees, else its own: its header's (which
    :func:`~metrobench.transcripts.records.read_run` holds to its records), else, for an old transcript
    or a reference result file, its records' (field, else the commonest case-id prefix).

    An explicit system that disagrees with the records is refused before anything is written:
    scoring a doha run as marta would otherwise replace marta's scores with "missing" cases.
    """
    if explicit:
        system = explicit
        if run.header is not None and run.header.system != explicit:
            raise MetrobenchError(f"{run.path}: --system {explicit}, but its header says {run.header.system} "
                                  "(field system); score it under its own system (omit --system)")
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


def selection_to_score(run: Run, system: str, partition: str | None, sample: int | None,
                       partitions: dict[str, str]) -> Selection:
    """The cases a run should hold: its recorded selection, else (or where they override it) the flags'."""
    recorded = recorded_selection(run)
    if recorded is not None and recorded.system != system:
        raise MetrobenchError(f"{run.path}: the run's cases were chosen from {recorded.system}, not {system}")
    split = split_digest(partitions)
    if recorded is not None and not overridden(recorded, partition, sample, split, str(run.path)):
        return recorded
    # the flags, each one not given taken from the run's record (else the whole system)
    return Selection(system=system, partition=partition or (recorded.partition if recorded else WHOLE),
                     split=split, sample=sample if sample is not None else (recorded.sample if recorded else None))
