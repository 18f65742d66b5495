"""Two judges compared without a ratings CSV: their ratings read from judge caches or scored folders.

Contract: :func:`from_caches` reads judge caches in the format
:class:`~metrobench.scoring.judge.JudgeCache` writes (one JSON object a line: ``key``, ``component``,
``case_id``, ``judge_model``, ``score``, ``reason``, ``raw``). Every judge model in a cache is one
rater (a cache the calibration judges share holds several), named by its model id, or
``model (file)`` when two caches hold one model id. An item is a ``case_id/component`` the judge
answered; its rating is the judge's 0/1/2 as read from its reply. A cache line does not hold the
answer it judged, so a judge that judged one case and component twice in one cache (two models'
answers, two systems) leaves the item ambiguous and is refused: compare scored folders instead.
Lines the cache itself would skip (one cut by a killed writer) are skipped with its warning;
replies without a ``Score: N`` to read (rated 1, as the reference scores them) are counted in a note.

:func:`from_scores` reads scored folders (:mod:`metrobench.scoring.store`); each folder is one
rater, named by the folder as given. An item is a ``model/system/case_id/component`` whose points
came from a judge's reply (the scorer's reason ``Judge: ...``; a short cut that needed no judge
call, alike under every judge, is left out), its rating the points normalised to 0/1/2 as Table 1
normalises them (:func:`metrobench.calibration.judging.normalise`).

:func:`common` keeps the items at least two raters rated, in sorted order, as the ratings
:func:`metrobench.stats.agreement.agreement_table` reads. Bad input (a file that is not a judge
cache, a rating other than 0/1/2, fewer than two raters, no item two raters share) is one
:class:`~metrobench.errors.MetrobenchError` naming the file, case and field.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from metrobench.calibration.judging import normalise
from metrobench.errors import MetrobenchError
from metrobench.scoring.judge import read_cache, skipped_lines
from metrobench.scoring.rubrics import reply_parsed

Ratings = dict[str, int]  # item id -> 0/1/2
#: The cache fields an item needs beside a verdict (written by Judge since it kept them).
ITEM_FIELDS = ("case_id", "component", "judge_model")
JUDGE_REASON = "Judge: "  # the scorer's reason for points a judge's reply gave (metrobench.scoring.scorer)


def _read_cache(path: Path) -> dict[str, Ratings]:
    """judge model -> item -> rating, from one cache file (module contract)."""
    if not path.exists():
        raise MetrobenchError(f"{path}: no such judge cache")
    lines, skipped = read_cache(path)
    entries: dict[str, dict] = {}
    for number, entry in lines:
        missing = [name for name in ITEM_FIELDS if not isinstance(entry.get(name), str)]
        if missing:
            raise MetrobenchError(f"{path}: line {number}: case {entry.get('case_id', '?')}: no field "
                                  f"{', '.join(missing)}: not a judge cache metrobench writes")
        score = entry["score"]
        if type(score) is not int or score not in (0, 1, 2):
            raise MetrobenchError(f"{path}: line {number}: case {entry['case_id']}: {entry['component']}: "
                                  f"field score: {score!r} is not a rating (0, 1 or 2)")
        entries[entry["key"]] = entry  # later lines win, as in the cache
    if not entries:
        why = f" ({skipped[0]})" if skipped else " (empty)"
        raise MetrobenchError(f"{path}: not a judge cache: no line holds a judgment (key, score, reason, raw)"
                              f"{why}")
    if skipped:
        print(f"metrobench: warning: {path}: {skipped_lines(skipped)}", file=sys.stderr)
    judges: dict[str, Ratings] = {}
    unparsed: dict[str, int] = {}
    for entry in entries.values():
        if isinstance(entry["raw"], str) and not reply_parsed(entry["raw"]):
            unparsed[entry["judge_model"]] = unparsed.get(entry["judge_model"], 0) + 1
        item = f"{entry['case_id']}/{entry['component']}"
        mine = judges.setdefault(entry["judge_model"], {})
        if item in mine:
            raise MetrobenchError(f"{path}: case {entry['case_id']}: {entry['component']}: judge "
                                  f"{entry['judge_model']} judged it more than once (answers of several "
                                  "models or runs): a cache line does not say which answer it judged; "
                                  "compare scored folders (--scores) instead")
        mine[item] = entry["score"]
    for model, n in sorted(unparsed.items()):
        print(f"metrobench: note: {path}: judge {model}: {n} of {len(judges[model])} replies without a "
              "'Score: N' to read, rated 1 (as the reference scores them)", file=sys.stderr)
    return judges


def from_caches(paths: Sequence[Path | str]) -> dict[str, Ratings]:
    """Rater -> item -> rating from judge caches (module contract)."""
    read = [(Path(path), _read_cache(Path(path))) for path in paths]
    models = [model for _, judges in read for model in judges]
    raters: dict[str, Ratings] = {}
    for path, judges in read:
        for model, ratings in sorted(judges.items()):
            raters[model if models.count(model) == 1 else f"{model} ({path})"] = ratings
    return raters


def from_scores(folders: Sequence[Path | str]) -> dict[str, Ratings]:
    """Rater (the folder) -> item -> rating from scored folders (module contract)."""
    from metrobench.scoring.store import read_scores

    raters: dict[str, Ratings] = {}
    for folder in map(str, folders):
        rows = read_scores(Path(folder)).to_pylist()
        raters[folder] = {f"{r['model']}/{r['system']}/{r['case_id']}/{r['component']}":
                          normalise(r["score"], r["max"]) for r in rows
                          if r["judged"] and r["score"] is not None and r["reason"].startswith(JUDGE_REASON)}
        if not raters[folder]:
            raise MetrobenchError(f"{folder}: no component scored by a judge's reply (scored with --judge none?)")
    return raters


def common(raters: Mapping[str, Ratings], sources: str) -> tuple[list[str], dict[str, list[int | None]]]:
    """The items two or more raters rated (sorted) and each rater's ratings of them (None: not rated)."""
    if len(raters) < 2:
        found = ", ".join(raters) or "none"
        raise MetrobenchError(f"judge-agreement: {sources} give one rater ({found}); agreement needs two: "
                              "give another judge cache or scored folder")
    seen: dict[str, int] = {}
    for ratings in raters.values():
        for item in ratings:
            seen[item] = seen.get(item, 0) + 1
    items = sorted(item for item, n in seen.items() if n >= 2)
    if not items:
        raise MetrobenchError(f"judge-agreement: {sources}: no case and component is rated by two of "
                              f"{', '.join(raters)} (were the same answers judged?)")
    return items, {name: [ratings.get(item) for item in items] for name, ratings in raters.items()}
