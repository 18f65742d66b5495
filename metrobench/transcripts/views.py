"""Views: the transcript a target reads, cut from a model's one growing work transcript.

Contract (issue 28): a model runs each case of a system once, into its work
transcript (:func:`metrobench.layout.work_path`), whichever target asked for it;
``bench``/``run`` with ``--work W --out V`` run the selection's missing cases into
``W`` (resuming it, as any run) and then write ``V``: ``W``'s records of exactly
the selection's cases, in ``W``'s order, each stamped with that selection
(``meta.selection``). So a held-out view and the full matrix of one model share
their held-out case runs, a teacher's train-partition traces are its benchmark
row's train cases, and each view scores exactly as a run made for its selection
alone would. A record's selection says which cases its view covers; what it was
run with (settings, serving, case digest) is checked on resume as always. A case's
record in a view is its last one in ``W`` (:func:`~metrobench.transcripts.records.latest_records`,
as the scorer reads it), so a case rerun after its data changed (``--rerun-changed``)
shows its new record while the old one stays in ``W``. ``V`` is never ``W``: the
commands refuse a ``--out`` that resolves to the work transcript (:func:`check_view_path`).
``V`` begins with a header as ``W`` does (:class:`~metrobench.transcripts.records.RunHeader`): ``W``'s,
stating the view's selection (one per view, where ``W``'s runs append several); cut from an old,
header-less ``W``, one made from its records (model, system, and the settings and serving they all
agree on), so every reader takes a view's system from its header alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metrobench.errors import MetrobenchError
from metrobench.transcripts.records import CaseRecord, RunHeader, latest_records, read_transcript, write_transcript

if TYPE_CHECKING:
    from metrobench.data.models import Case
    from metrobench.data.selection import Selection


def cut_view(work: Path, out: Path, selection: Selection, cases: list[Case]) -> int:
    """Write ``out``: the records of ``work`` for ``cases``, stamped with ``selection``; returns their count."""
    wanted = {case.id for case in cases}
    stamp = selection.to_meta()
    header, held = read_transcript(Path(work))
    # never a doubled case: of several records of one, the last (latest_records: as the scorer reads it)
    latest, _ = latest_records(r for r in held if r.case_id in wanted)
    records = list(latest.values())
    for record in records:
        record.meta["selection"] = stamp
    if header is None:
        header = _header_of(records, selection.system)
    write_transcript(Path(out), records, header.with_selection(stamp) if header else None)
    return len(records)


def _header_of(records: list[CaseRecord], system: str) -> RunHeader | None:
    """A header for a view cut from an old, header-less work transcript: its records' model, the
    selection's system, and each run stamp all the records agree on (``None`` where they differ or
    lack it); no header when no record names a model."""
    model = next((r.model for r in records if r.model), "")
    if not model:
        return None

    def agreed(key: str) -> Any:
        values = {json.dumps(r.meta.get(key), sort_keys=True) for r in records}
        return json.loads(values.pop()) if len(values) == 1 else None

    return RunHeader(model=model, system=system, config=agreed("config"), settings=agreed("settings"),
                     serving=agreed("serving"), version="")  # which metrobench began it: unknown


def check_view_path(work: Path, out: Path) -> None:
    """Refuse ``--out`` naming the work transcript itself under any spelling (``w/x/../x/m.jsonl``,
    ``./w/m.jsonl``, a symbolic or hard link): cutting the view would replace the model's whole
    transcript, every other view's paid-for cases, with this selection's."""
    import os

    work, out = Path(work), Path(out)
    same = work.resolve() == out.resolve()
    if not same and work.exists() and out.exists():
        same = os.path.samefile(work, out)
    if same:
        raise MetrobenchError(f"--out {out} is the work transcript --work {work} (the same file): the view "
                              "would replace every case it holds; give --out a path of its own")
