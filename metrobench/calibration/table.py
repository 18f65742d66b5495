"""Table 1: agreement between every pair of raters of the calibration sample (paper layout).

Contract: raters are people, read from ratings CSVs (:func:`read_people`: a pair id column
first, then one 0/1/2 column per rater, blank for a pair not rated), and judges
(:mod:`metrobench.calibration.judging`), people first. :func:`table1` gives, for every pair of
raters over the pairs both rated, n, exact agreement, agreement within one point, the
quadratic-weighted kappa with its percentile bootstrap interval and Gwet's AC2
(:mod:`metrobench.stats.agreement`), then the same per rubric (kappa without an interval, as
the paper reports it). A pair of raters whose ratings leave kappa undefined (both gave one
and the same rating to every pair: no variance) says so in its ``note`` instead of a NaN, and
one where a single rater gave one rating throughout notes that its kappa is 0 by construction.
With fewer than two raters the table is the one rater's rating distribution, or with none the
sample's composition, and its notes say what is missing.

A ratings file is refused, in one error naming the file, line, pair and field, and before
anything is written, when it is empty, names a pair id the sample lacks (or one twice), holds a
rating other than 0, 1, 2 or blank (3, "two"), or repeats a rater column (within the file,
across files, or a judge's name). :func:`read_ratings_csv` is the one reader of ratings CSVs
(``judge-agreement --ratings`` reads its files with it too): UTF-8 or UTF-16 with a byte-order
mark, split at ``,``, ``;`` or a tab.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from metrobench.calibration.sample import Sample
from metrobench.errors import MetrobenchError
from metrobench.paper.markdown import DASH, grid, num
from metrobench.stats.agreement import agreement, gwet_ac2, weighted_kappa

if TYPE_CHECKING:
    from metrobench.study import StudyConfig

Ratings = dict[int, int | None]  # pair id -> 0/1/2, None: not rated
RATINGS = {"0": 0, "1": 1, "2": 2}
ALL = "all"
AGREEMENT_COLUMNS = ["rater_a", "rater_b", "rubric", "n", "exact", "within_one", "kappa_w", "kappa_lo",
                     "kappa_hi", "ac2", "note"]


#: The delimiters a ratings CSV may use: a spreadsheet in a comma-decimal locale saves ``;``.
DELIMITERS = (",", ";", "\t")
_SHOWN = {",": "','", ";": "';'", "\t": "a tab"}


def _ratings_text(path: Path) -> str:
    """The file's text: UTF-8 (a byte-order mark dropped) or UTF-16 with its byte-order mark (what
    a spreadsheet's "Unicode text" saves); anything else is refused in one line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MetrobenchError(f"{path}: no such ratings file") from None
    except OSError as exc:
        raise MetrobenchError(f"{path}: ratings file unreadable ({exc.strerror or exc})") from None
    try:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            return data.decode("utf-16")
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MetrobenchError(f"{path}: not UTF-8 text (a ratings CSV; save it as CSV UTF-8)") from None
    if "\x00" in text:
        raise MetrobenchError(f"{path}: NUL bytes: UTF-16 without a byte-order mark? (a ratings CSV; save it as "
                              "CSV UTF-8)")
    return text


def _delimiter(header: str) -> str:
    """The delimiter of the header line: the most frequent of :data:`DELIMITERS` in it (ties: ``,``)."""
    counts = {d: header.count(d) for d in DELIMITERS}
    best = max(DELIMITERS, key=lambda d: counts[d])
    return best if counts[best] else ","


def read_ratings_csv(path: Path | str, parse_item: Callable[[str], Any], *, item: str = "item",
                     taken: Mapping[str, str] | None = None) -> tuple[list[Any], dict[str, list[int | None]]]:
    """One ratings CSV: the items in row order (as ``parse_item`` makes them) and rater -> ratings in
    that order (None: blank, not rated). The one reader of Table 1's people (:func:`read_people`)
    and of ``judge-agreement --ratings``, so both refuse the same files.

    Read as UTF-8 (with or without a BOM) or UTF-16 with a BOM, split at ``,``, ``;`` or a tab (the
    header's most frequent; named in a field-count error). Refused, in one error naming the file,
    line, ``item`` and field: an empty file, a rater column without a name or repeated (within the
    file, or in ``taken``: name -> who has it), a row of another width, an item ``parse_item``
    refuses (it raises :class:`ValueError` with why), an item on two lines (it would count twice),
    a rating other than 0, 1, 2 or blank."""
    path = Path(path)
    lines = _ratings_text(path).splitlines()
    first = next((line for line in lines if line.strip()), "")
    delimiter = _delimiter(first)
    rows = [(number, row) for number, row in enumerate(csv.reader(lines, delimiter=delimiter), start=1)
            if any(cell.strip() for cell in row)]
    if len(rows) < 2 or len(rows[0][1]) < 2:
        one = f" (one column: split at {_SHOWN[delimiter]})" if rows and len(rows[0][1]) < 2 else ""
        raise MetrobenchError(f"{path}: empty{one}: a ratings CSV has a header (id, rater, ...) and a row per "
                              f"rated {item}")
    header_line, header = rows[0][0], [cell.strip() for cell in rows[0][1]]
    taken = taken or {}
    raters: dict[str, list[int | None]] = {}
    for name in header[1:]:
        if not name:
            raise MetrobenchError(f"{path}: line {header_line}: a rater column without a name")
        if name in raters or name in taken:
            where = "this file" if name in raters else taken[name]
            raise MetrobenchError(f"{path}: line {header_line}: rater column {name!r} is duplicated ({where} has it)")
        raters[name] = []
    items: list[Any] = []
    seen: dict[Any, int] = {}
    for line, row in rows[1:]:
        if len(row) != len(header):
            raise MetrobenchError(f"{path}: line {line}: {len(row)} fields, the header has {len(header)} "
                                  f"(split at {_SHOWN[delimiter]})")
        text_id = row[0].strip()
        try:
            key = parse_item(text_id)
        except ValueError as exc:
            raise MetrobenchError(f"{path}: line {line}: field {header[0] or 'id'}: {text_id!r} {exc}") from None
        if key in seen:
            raise MetrobenchError(f"{path}: line {line}: {item} {key} is rated on an earlier line too "
                                  f"(line {seen[key]})")
        seen[key] = line
        items.append(key)
        for name, cell in zip(header[1:], row[1:]):
            value = cell.strip()
            if value and value not in RATINGS:
                raise MetrobenchError(f"{path}: line {line}: {item} {key}: field {name}: {value!r} is not a "
                                      "rating (0, 1, 2, or blank for not rated)")
            raters[name].append(RATINGS.get(value))
    return items, raters


def any_item(text: str) -> str:
    """An item id of ``judge-agreement --ratings``: any text but blank."""
    if not text:
        raise ValueError("is not an item id (blank)")
    return text


def read_people(paths: Sequence[Path | str], ids: Sequence[int], taken: Sequence[str] = ()) -> dict[str, Ratings]:
    """Rater -> ratings from the CSV files in order (module contract; :func:`read_ratings_csv`);
    ``taken``: the judges' names."""
    known = set(ids)

    def pair_id(text: str) -> int:
        pair = int(text) if text.isascii() and text.isdigit() else None
        if pair not in known:
            raise ValueError("is not a pair id of the calibration sample")
        return pair

    raters: dict[str, Ratings] = {}
    owner = {name: "a judge" for name in taken}
    for path in map(Path, paths):
        pairs, mine = read_ratings_csv(path, pair_id, item="pair", taken=owner)
        for name, column in mine.items():
            raters[name] = dict(zip(pairs, column))
            owner[name] = str(path)
    return raters


def _no_variance(a: Sequence[int], b: Sequence[int], first: str, second: str) -> str:
    """What a rater's constant ratings do to kappa_w: undefined (both, alike) or 0 by construction (one)."""
    values = set(a) | set(b)
    if len(values) == 1:
        return f"no variance: both raters gave every pair a {values.pop()}; kappa is undefined"
    constant = [f"{name} gave every pair a {next(iter(set(mine)))}" for name, mine in ((first, a), (second, b))
                if len(set(mine)) == 1]
    return f"no variance: {'; '.join(constant)}, so kappa is 0 by construction (see AC2)" if constant else ""


def _row(first: str, second: str, rubric: str, a: list[int], b: list[int], *, interval: bool,
         n_resamples: int, seed: int) -> dict[str, Any]:
    if interval:
        stat = agreement("", a, b, n_resamples=n_resamples, seed=seed)
        kappa, lo, hi, ac2 = stat.kappa, stat.kappa_lo, stat.kappa_hi, stat.ac2
    else:
        kappa, lo, hi, ac2 = weighted_kappa(a, b), math.nan, math.nan, gwet_ac2(a, b)
    n = len(a)
    return {"rater_a": first, "rater_b": second, "rubric": rubric, "n": n,
            "exact": sum(x == y for x, y in zip(a, b)) / n,
            "within_one": sum(abs(x - y) <= 1 for x, y in zip(a, b)) / n,
            "kappa_w": kappa, "kappa_lo": lo, "kappa_hi": hi, "ac2": ac2,
            "note": _no_variance(a, b, first, second)}


@dataclass
class Table1:
    """The frame (CSV) and what its Markdown prints: the kind of table and its notes."""

    frame: pd.DataFrame
    kind: str  # agreement | distribution | composition
    notes: list[str] = field(default_factory=list)


def _agreement(sample: Sample, raters: Mapping[str, Ratings], n_resamples: int, seed: int) -> pd.DataFrame:
    rubric_of = {pair["id"]: pair["rubric"] for pair in sample.pairs}
    rubrics = sorted(set(rubric_of.values()))
    rows = []
    for first, second in combinations(raters, 2):
        both = [(i, raters[first][i], raters[second][i]) for i in sample.ids
                if raters[first].get(i) is not None and raters[second].get(i) is not None]
        if not both:
            continue
        rows.append(_row(first, second, ALL, [x for _, x, _ in both], [y for _, _, y in both], interval=True,
                         n_resamples=n_resamples, seed=seed))
        for rubric in rubrics:
            mine = [(x, y) for i, x, y in both if rubric_of[i] == rubric]
            if mine:
                rows.append(_row(first, second, rubric, [x for x, _ in mine], [y for _, y in mine],
                                 interval=False, n_resamples=n_resamples, seed=seed))
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


def _distribution(sample: Sample, rater: str, ratings: Ratings) -> pd.DataFrame:
    rows = []
    for rubric in [ALL, *sorted({p["rubric"] for p in sample.pairs})]:
        given = [ratings.get(p["id"]) for p in sample.pairs if rubric in (ALL, p["rubric"])]
        counts = Counter(r for r in given if r is not None)
        rows.append({"rater": rater, "rubric": rubric, "n": sum(counts.values()),
                     **{f"rated_{k}": counts.get(k, 0) for k in (0, 1, 2)}})
    return pd.DataFrame(rows)


def _counts(values: Any) -> str:
    """``"C:14 K:1"``: each value and how often, in name order."""
    return " ".join(f"{value}:{n}" for value, n in sorted(Counter(values).items()))


def _composition(sample: Sample) -> pd.DataFrame:
    rows = []
    for rubric in sorted({p["rubric"] for p in sample.pairs}):
        mine = [p for p in sample.pairs if p["rubric"] == rubric]
        rows.append({"rubric": rubric, "n": len(mine), "categories": _counts(p["category"] for p in mine),
                     "systems": _counts(p["system"] for p in mine)})
    return pd.DataFrame(rows)


def table1(sample: Sample, people: Mapping[str, Ratings], judges: Mapping[str, Ratings], *,
           n_resamples: int, seed: int) -> Table1:
    """Table 1 from the sample and its raters (module contract)."""
    raters = {**people, **judges}
    rubrics = Counter(p["rubric"] for p in sample.pairs)
    notes = [f"Sample: {len(sample.pairs)} case-rubric pairs ({sample.source}); "
             + ", ".join(f"{r} {n}" for r, n in sorted(rubrics.items())) + "."]
    if sample.changed:
        notes.append(f"Cases rewritten since the sample was drawn (rated against today's case): "
                     f"{', '.join(sample.changed)}.")
    if judges:
        notes.append(f"Judges: {', '.join(judges)} (0/1/2; a rubric answered without a judge call counts its "
                     "points normalised: none 0, full 2, partial 1).")
    if not people:
        notes.append("No people's ratings (calibration.ratings)"
                     + (": judge-vs-judge agreement only." if len(judges) > 1 else
                        ": the judge's rating distribution only; agreement needs people's ratings." if judges else
                        " and no judge (scoring.judge: none, no calibration.judges): the sample's composition "
                        "only."))
    elif not judges:
        notes.append("No judge (scoring.judge: none, no calibration.judges): people's agreement only.")
    if len(raters) >= 2:
        frame = _agreement(sample, raters, n_resamples, seed)
        notes.append(f"Quadratic weights; 95 % percentile bootstrap of kappa_w over pairs ({n_resamples} "
                     f"resamples, seed {seed}); per-rubric rows: kappa_w without an interval.")
        return Table1(frame, "agreement", notes)
    if raters:
        [(name, ratings)] = raters.items()
        return Table1(_distribution(sample, name, ratings), "distribution", notes)
    return Table1(_composition(sample), "composition", notes)


def _pct(value: Any) -> str:
    return DASH if value is None or pd.isna(value) else f"{100 * float(value):.0f} %"


def markdown(table: Table1, extra_note: str | None = None) -> str:
    """Table 1 as the paper prints it: rater pairs, then per-rubric kappa_w, then the notes."""
    frame = table.frame
    notes = list(table.notes) + ([extra_note] if extra_note else [])
    if table.kind != "agreement":
        text = grid(list(frame.columns), frame.itertuples(index=False))
    else:
        overall = frame[frame["rubric"] == ALL]
        rows = []
        for r in overall.itertuples(index=False):
            kappa = (r.note or DASH) if pd.isna(r.kappa_w) else \
                f"{num(r.kappa_w)} [{num(r.kappa_lo)}, {num(r.kappa_hi)}]"
            rows.append([f"{r.rater_a} vs {r.rater_b}", r.n, _pct(r.exact), _pct(r.within_one), kappa, num(r.ac2)])
        text = grid(["Raters", "n", "Exact", "Within one", "κw [95 % CI]", "Gwet AC2"], rows)
        per = frame[frame["rubric"] != ALL]
        if len(per):
            pairs = [f"{a} vs {b}" for a, b in dict.fromkeys(zip(overall["rater_a"], overall["rater_b"]))]
            cells = {(f"{r.rater_a} vs {r.rater_b}", r.rubric): r for r in per.itertuples(index=False)}
            body = []
            for rubric in sorted(set(per["rubric"])):
                row: list[object] = [rubric]
                for pair in pairs:
                    r = cells.get((pair, rubric))
                    row.append(DASH if r is None else
                               f"{'n/a (no variance)' if pd.isna(r.kappa_w) else num(r.kappa_w)} (n={r.n})")
                body.append(row)
            text += "\nPer-rubric κw\n\n" + grid(["Rubric", *pairs], body)
    return text + "".join(f"\n{note}\n" for note in notes)


def write_table1(table: Table1, path: Path | str, config: StudyConfig | None = None) -> Path:
    """``path`` (CSV, every number) and the Markdown beside it."""
    from metrobench.atomic import write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    note = config.report.notes.get("table1") if config is not None else None
    write_text(path, table.frame.to_csv(index=False, lineterminator="\n"))
    write_text(path.with_suffix(".md"), markdown(table, note))
    return path


def ratings_csv(ids: Sequence[Any], columns: Mapping[str, Mapping[Any, int | None]]) -> str:
    """Ratings of ``ids`` (a sample's pair ids, or any item ids) as the CSV the table and
    ``judge-agreement --ratings`` read: id, then one column per rater (blank: not rated)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", *columns])
    for pair in ids:
        writer.writerow([pair, *("" if columns[c].get(pair) is None else columns[c][pair] for c in columns)])
    return out.getvalue()
