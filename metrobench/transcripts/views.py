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
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.errors import MetrobenchError
from metrobench.transcripts.records import iter_transcript, latest_records, write_transcript

if TYPE_CHECKING:
    from metrobench.data.models import Case
    from metrobench.data.selection import Selection


def cut_view(work: Path, out: Path, selection: Selection, cases: list[Case]) -> int:
    """Write ``out``: the records of ``work`` for ``cases``, stamped with ``selection``; returns their count."""
    wanted = {case.id for case in cases}
    stamp = selection.to_meta()
    # never a doubled case: of several records of one, the last (latest_records: as the scorer reads it)
    latest, _ = latest_records(r for r in iter_transcript(Path(work)) if r.case_id in wanted)
    records = list(latest.values())
    for record in records:
        record.meta["selection"] = stamp
    write_transcript(Path(out), records)
    return len(records)


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
