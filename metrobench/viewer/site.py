"""Writing the viewer's site: gather the cases, render every page, write the files.

The site's folder may hold only what the viewer wrote. Every build records its
files and their SHA-256 digests in a manifest, :data:`MARKER`; a rebuild replaces
and deletes only files the manifest lists, unchanged since they were written. A
folder holding anything else (a user's notes, a page they edited, a web folder
the site was copied into with its manifest) is refused before anything is read,
naming the first such file, and nothing in it is touched. Pages are rendered into
a temporary folder inside ``out`` and moved into place one by one, so ``out``
itself (the current folder, a web root with its own permissions) is never
replaced; while they move, the manifest lists both builds' digests, so a build
killed half-way leaves only listed files and the next build finishes the job.
Model names and case ids become file names, so they are checked first (the
scores' folder names are not trusted).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from metrobench.data.root import ENV_VAR
from metrobench.atomic import fsync_dir, remove_stale_temporaries, temporary_for, write_text
from metrobench.errors import MetrobenchError
from metrobench.scoring.names import check_name
from metrobench.viewer.pages import case_page, compare_page, index_page, model_page
from metrobench.viewer.load import CaseResult, attach_records, load_scores, rebuild_conversations
from metrobench.vocabulary import WHOLE_IN_REPORTS

_CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")   # fullmatch: "$" would let a final newline in
#: The manifest every site carries: the files the viewer wrote there, with their digests.
MARKER = ".metrobench-view"
#: The manifest's format; a marker of another form (an older viewer's one-line marker) is read as
#: listing the pages the site's layout names, whatever their content (:data:`_SITE_PAGE`).
MANIFEST_FORMAT = 1
_SITE_PAGE = re.compile(r"(index|calibrate)\.html|models/[^/]+\.html|cases/[^/]+/[^/]+\.html|compare/[^/]+\.html")
#: The folder pages are rendered in, inside ``out`` (``.site.<pid>.tmp``), and the manifest's own temporary.
_STAGING = "site"
_OURS_IN_FLIGHT = re.compile(r"\.(site|\.metrobench-view)\.\d+\.tmp")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entries(folder: Path) -> list[str]:
    """Every entry under ``folder`` that is not a folder (files, links: a linked folder is not
    followed), as sorted relative POSIX paths; this build's and a killed build's temporaries left out."""
    found: list[str] = []
    for here, dirs, files in os.walk(folder):
        rel_here = Path(here).relative_to(folder)
        if rel_here == Path("."):
            dirs[:] = [d for d in dirs if not _OURS_IN_FLIGHT.fullmatch(d)]
            files = [f for f in files if not _OURS_IN_FLIGHT.fullmatch(f)]
        found += [(rel_here / name).as_posix() for name in files]
        found += [(rel_here / name).as_posix() for name in dirs if Path(here, name).is_symlink()]
    return sorted(found)


def _read_manifest(out: Path) -> dict[str, set[str]] | None:
    """The manifest's files and their accepted digests; ``None``: an older viewer's marker (no digests)."""
    try:
        manifest = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = manifest.get("files") if isinstance(manifest, dict) and manifest.get("format") == MANIFEST_FORMAT \
        else None
    if not isinstance(files, dict) or not all(isinstance(v, list) for v in files.values()):
        return None
    return {str(rel): {str(d) for d in digests} for rel, digests in files.items()}


def _write_manifest(out: Path, files: Mapping[str, set[str]]) -> None:
    text = json.dumps({"written_by": "metrobench view", "format": MANIFEST_FORMAT,
                       "files": {rel: sorted(files[rel]) for rel in sorted(files)}}, indent=1)
    write_text(out / MARKER, text + "\n")


def check_out(out: Path) -> dict[str, set[str]]:
    """Refuse an ``out`` that is a file or a link, or a folder holding anything the viewer did not
    write (the first such file named); returns the files a previous build wrote (the manifest's)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise MetrobenchError(f"{out}: --out must be a folder for the site, not a file or a link")
    if not out.is_dir():
        return {}
    entries = _entries(out)
    has_marker = (out / MARKER).is_file() and not (out / MARKER).is_symlink()
    manifest = _read_manifest(out) if has_marker else {}
    written: dict[str, set[str]] = {}
    for rel in entries:
        if rel == MARKER and has_marker:
            continue
        path = out / rel
        ours = not path.is_symlink() and (rel in manifest if manifest is not None else bool(_SITE_PAGE.fullmatch(rel)))
        if not ours:
            raise MetrobenchError(f"{out}: holds {rel}, which `metrobench view` did not write: the viewer replaces "
                                  "only its own files, so give a new or empty folder, or move that file out; "
                                  "nothing was changed")
        digest = _digest(path)
        if manifest is not None and digest not in manifest[rel]:
            raise MetrobenchError(f"{out}: {rel} was changed since `metrobench view` wrote it: the viewer would "
                                  "overwrite it, so give a new or empty folder, or move that file out; "
                                  "nothing was changed")
        written[rel] = manifest[rel] if manifest is not None else {digest}
    return written


def _prune(out: Path, rel: str) -> None:
    """Remove the folders a deleted page leaves empty, up to (never) ``out``."""
    parent = (out / rel).parent
    while parent != out:
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent


def publish(out: Path, fill: Callable[[Path], None]) -> None:
    """Render with ``fill(folder)`` inside ``out``, then move the pages into place and delete the
    previous build's pages no longer written; only files the manifest lists are ever replaced or deleted."""
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out, _STAGING)
    staging = temporary_for(out / _STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        fill(staging)
        new = {rel: {_digest(staging / rel)} for rel in _entries(staging)}
        old = check_out(out)   # again, just before anything is replaced: nothing foreign came in meanwhile
        _write_manifest(out, {rel: old.get(rel, set()) | new.get(rel, set()) for rel in {*old, *new}})
        for rel in new:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, out / rel)
        for rel in sorted(set(old) - set(new)):
            (out / rel).unlink(missing_ok=True)
            _prune(out, rel)
        _write_manifest(out, new)
        fsync_dir(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class SiteSummary:
    """What was written: the folder, its models, its case and comparison pages."""

    out: Path
    models: list[str]
    case_pages: int
    compare_pages: int
    without_record: int


def _check_names(views: list[CaseResult]) -> None:
    for view in views:
        check_name("model", view.model)
        if not _CASE_ID.fullmatch(view.case_id):
            raise MetrobenchError(f"case id {view.case_id!r} of model {view.model} cannot name a file")


def _write(path: Path, text: str) -> None:
    """One page as UTF-8. A lone surrogate (JSON may carry ``"\\ud800"``, UTF-8 cannot) in a recorded
    reply or argument is written as its escape text, ``\\ud800``: shown as recorded, never a crash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", errors="backslashreplace")


def _render_all(tmp: Path, by_model: dict[str, list[CaseResult]], by_case: dict[str, list[CaseResult]],
                labels: Mapping[str, str] | None = None, partition: str = WHOLE_IN_REPORTS) -> int:
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
    from metrobench.calibration.sample import load_sample
    from metrobench.data import Benchmark
    from metrobench.viewer.calibrate import calibrate_page

    loaded = load_sample(sample, Benchmark.open(data))
    digest = hashlib.sha256(Path(sample).read_bytes()).hexdigest()[:16]
    return calibrate_page(loaded.pairs, digest)


def build_site(runs: Path, scores: Path, out: Path, *, models: list[str] | None = None,
               data: str | Path | None = None, partition: str = WHOLE_IN_REPORTS,
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
    by_model: dict[str, list[CaseResult]] = {m: [] for m in order}
    by_case: dict[str, list[CaseResult]] = defaultdict(list)
    for view in views:
        by_model[view.model].append(view)
        by_case[view.case_id].append(view)
    for group in by_case.values():
        group.sort(key=lambda v: order.index(v.model))
    compare_pages: list[int] = []

    def fill(folder: Path) -> None:
        compare_pages.append(_render_all(folder, by_model, by_case, labels, partition))
        if rating_page is not None:
            _write(folder / "calibrate.html", rating_page)

    publish(Path(out), fill)
    return SiteSummary(Path(out), order, len(views), compare_pages[0], len(views) - attached)
