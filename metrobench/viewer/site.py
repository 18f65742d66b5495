"""Writing the viewer's site: gather the cases, render every page, write the files.

The site is written to a temporary folder beside ``out`` and swapped into
place at the end, so an interrupted build never leaves a half-written site
and a rebuild drops pages of cases no longer viewed. The swap replaces ``out``
whole, so ``out`` must be new, empty, or a site this module wrote (it carries
:data:`MARKER`): any other folder (``--out results``) is refused before anything
is read, never emptied. Model names and case ids
become file names, so they are checked first (the scores' folder names are
not trusted).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from metrobench.data.root import ENV_VAR
from metrobench.atomic import atomic_dir
from metrobench.errors import MetrobenchError
from metrobench.scoring.names import check_name
from metrobench.viewer.pages import case_page, compare_page, index_page, model_page
from metrobench.viewer.load import CaseView, attach_records, load_scores, rebuild_conversations

_CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")   # fullmatch: "$" would let a final newline in
#: The file every site carries: the one kind of folder a rebuild may replace.
MARKER = ".metrobench-view"


def check_out(out: Path) -> None:
    """Refuse an ``out`` that is a file, or a non-empty folder no ``metrobench view`` wrote."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise MetrobenchError(f"{out}: --out must be a folder for the site, not a file or a link")
    if out.is_dir() and not (out / MARKER).is_file() and any(out.iterdir()):
        raise MetrobenchError(f"{out}: not empty and not a site `metrobench view` wrote (no {MARKER} in it): "
                              "the site replaces its folder whole, so give a new or empty folder; nothing was changed")


@dataclass(frozen=True)
class SiteSummary:
    """What was written: the folder, its models, its case and comparison pages."""

    out: Path
    models: list[str]
    case_pages: int
    compare_pages: int
    without_record: int


def _check_names(views: list[CaseView]) -> None:
    for view in views:
        check_name("model", view.model)
        if not _CASE_ID.fullmatch(view.case_id):
            raise MetrobenchError(f"case id {view.case_id!r} of model {view.model} cannot name a file")


def _write(path: Path, text: str) -> None:
    """One page as UTF-8. A lone surrogate (JSON may carry ``"\\ud800"``, UTF-8 cannot) in a recorded
    reply or argument is written as its escape text, ``\\ud800``: shown as recorded, never a crash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", errors="backslashreplace")


def _render_all(tmp: Path, by_model: dict[str, list[CaseView]], by_case: dict[str, list[CaseView]],
                labels: Mapping[str, str] | None = None, partition: str = "full") -> int:
    """Write every page under ``tmp``; returns the number of comparison pages."""
    compared = {case_id: group for case_id, group in by_case.items() if len(group) > 1}
    _write(tmp / "index.html", index_page(by_model, list(compared), labels, partition))
    for model, cases in by_model.items():
        _write(tmp / "models" / f"{model}.html", model_page(model, cases, set(compared)))
        for case in cases:
            _write(tmp / "cases" / model / f"{case.case_id}.html", case_page(case, case.case_id in compared))
    for case_id, group in compared.items():
        _write(tmp / "compare" / f"{case_id}.html", compare_page(group))
    return len(compared)


def _rating_page(sample: str | Path, data: str | Path | None) -> str:
    """The rating page of a calibration sample, checked against the benchmark first."""
    import hashlib

    from metrobench.calibration.sample import load_sample
    from metrobench.data import Benchmark
    from metrobench.viewer.calibrate import calibrate_page

    loaded = load_sample(sample, Benchmark.open(data))
    digest = hashlib.sha256(Path(sample).read_bytes()).hexdigest()[:16]
    return calibrate_page(loaded.pairs, digest)


def build_site(runs: Path, scores: Path, out: Path, *, models: list[str] | None = None,
               data: str | Path | None = None, partition: str = "full",
               calibration: str | Path | None = None, labels: Mapping[str, str] | None = None) -> SiteSummary:
    """The whole site for the chosen models (default: every model in the scores).

    With the benchmark at ``data`` (default ``$METROBENCH_DATA``) pages show each
    case's title, and records without messages get their prompt and user turns
    rebuilt; without it those cases show their tool calls only. With a ``calibration``
    sample the site also holds ``calibrate.html``, the page people rate it on
    (:mod:`metrobench.viewer.calibrate`). ``labels`` (model -> leaderboard label,
    :func:`metrobench.viewer.labels.leaderboard_labels`) name the index's models as Table 2 does.
    """
    check_out(Path(out))
    rating_page = _rating_page(calibration, data) if calibration is not None else None
    views = load_scores(scores, models, partition)
    if not views:
        raise MetrobenchError(f"{scores}: no scored cases in partition {partition}")
    _check_names(views)
    attached = attach_records(views, Path(runs))
    if attached == 0:
        raise MetrobenchError(f"{runs}: no run file holds any scored case "
                              f"(expected {runs}/<model>/<system>.jsonl)")
    if data is not None or os.environ.get(ENV_VAR):
        rebuild_conversations(views, data)
    order = models or sorted({v.model for v in views})
    by_model: dict[str, list[CaseView]] = {m: [] for m in order}
    by_case: dict[str, list[CaseView]] = defaultdict(list)
    for view in views:
        by_model[view.model].append(view)
        by_case[view.case_id].append(view)
    for group in by_case.values():
        group.sort(key=lambda v: order.index(v.model))
    with atomic_dir(out) as tmp:
        compare_pages = _render_all(tmp, by_model, by_case, labels, partition)
        if rating_page is not None:
            _write(tmp / "calibrate.html", rating_page)
        (tmp / MARKER).write_text("written by metrobench view; a rebuild replaces this folder\n")
    return SiteSummary(Path(out), order, len(views), compare_pages, len(views) - attached)
