"""Scores on disk: Parquet, one row per case x component, hive-partitioned by model and system.

``DIR/model=M/system=S/part.parquet`` holds one scored run. Model and system
live in the path (that is what hive partitioning means), so
``pandas.read_parquet(DIR)`` returns every row with both. Each file is
written to a hidden temporary name, fsynced and renamed into place (the folder
fsynced after), so a reader never sees half a file and an interrupted scoring
run leaves the old scores intact. The temporary file goes on any exit Python
sees (an exception, Ctrl-C); one left by a killed process is removed by the
next write to that folder. A file that is not Parquet is one error naming it.
A reader reads exactly the files the layout names: any other file or folder in a
scores folder (a ``part.parquet.bak`` beside ``part.parquet``, a flat folder of
Parquet files, a ``notes.txt``) is refused with one error naming it, and so is a
Parquet file at the right place without this schema (another tool's); only hidden
names (a killed writer's ``.part.parquet.PID.tmp``) are passed over.
Rows are in case-file order, components in the reference's breakdown order:
the aggregation sums in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import unquote
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from metrobench import layout
from metrobench.atomic import atomic_open
from metrobench.errors import MetrobenchError
from metrobench.scoring.judge import without_surrogates
from metrobench.scoring.names import check_name
from metrobench.scoring.metrics import CaseTotals, Component, case_totals
from metrobench.scoring.scorer import CaseScore

#: Columns stored in each file (model and system come from the path).
FILE_SCHEMA = pa.schema([
    pa.field("case_id", pa.string(), nullable=False),
    pa.field("category", pa.string(), nullable=False),
    pa.field("partition", pa.string(), nullable=False),
    pa.field("component", pa.string(), nullable=False),
    pa.field("tier", pa.int8(), nullable=False),
    pa.field("score", pa.float64()),            # null: judged component, not judged
    pa.field("max", pa.float64(), nullable=False),
    pa.field("judged", pa.bool_(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("error", pa.string()),             # the case's run error ("missing" if absent)
])
#: Every column as read back.
SCHEMA = pa.schema([pa.field("model", pa.string(), nullable=False),
                    pa.field("system", pa.string(), nullable=False), *FILE_SCHEMA])


def partition_path(out: Path, model: str, system: str) -> Path:
    """Where one run's scores go under ``out`` (:func:`metrobench.layout.score_partition`), names checked."""
    return Path(layout.score_partition(str(out), check_name("model", model), check_name("system", system)))


def to_table(scores: Sequence[CaseScore], partitions: dict[str, str]) -> pa.Table:
    columns: dict[str, list] = {name: [] for name in FILE_SCHEMA.names}
    for case in scores:
        for c in case.components:
            columns["case_id"].append(case.case_id)
            columns["category"].append(case.category)
            columns["partition"].append(partitions.get(case.case_id, "unassigned"))
            columns["component"].append(c.component)
            columns["tier"].append(c.tier)
            columns["score"].append(None if c.score is None else float(c.score))
            columns["max"].append(float(c.max))
            columns["judged"].append(c.judged)
            columns["reason"].append(without_surrogates(c.reason))
            columns["error"].append(None if case.error is None else without_surrogates(case.error))
    return pa.table(columns, schema=FILE_SCHEMA)


def write_scores(out: Path, model: str, system: str, scores: Sequence[CaseScore],
                 partitions: dict[str, str]) -> Path:
    """Write one run's scores atomically; returns the file written."""
    path = partition_path(out, model, system)
    table = to_table(scores, partitions)
    with atomic_open(path, "wb") as fh:
        pq.write_table(table, fh, compression="zstd")
    return path


def _partition_value(folder: Path, key: str) -> str | None:
    """``M`` of a folder named ``key=M``, else None."""
    prefix = f"{key}="
    return unquote(folder.name[len(prefix):]) if folder.name.startswith(prefix) and folder.is_dir() else None


def _stray(root: Path, found: Path) -> MetrobenchError:
    return MetrobenchError(f"{found}: not a scores file (a scores folder holds only "
                           f"{root}/model=M/system=S/{_FILE_NAME}); move it out of {root}")


_FILE_NAME = Path(layout.score_partition("", "M", "S")).name


def score_files(root: Path) -> list[tuple[str, str, Path]]:
    """(model, system, file) of each file the layout names under ``root``, in path order.

    Anything else in ``root`` is refused (hidden names passed over): a stray file must
    not be read as scores, nor silently left out of what a table says it covers.
    """
    found: list[tuple[str, str, Path]] = []
    for model_dir in sorted(_visible(root)):
        model = _partition_value(model_dir, "model")
        if model is None:
            raise _stray(root, model_dir)
        for system_dir in sorted(_visible(model_dir)):
            system = _partition_value(system_dir, "system")
            if system is None:
                raise _stray(root, system_dir)
            for item in sorted(_visible(system_dir)):
                if item.name != _FILE_NAME or not item.is_file():
                    raise _stray(root, item)
                found.append((model, system, item))
    return found


def _visible(folder: Path) -> list[Path]:
    return [item for item in folder.iterdir() if not item.name.startswith(".")]


def _read_file(path: Path) -> pa.Table:
    """One scores file, checked against :data:`FILE_SCHEMA` (another tool's Parquet is one error)."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:  # a truncated, empty or foreign file
        message = " ".join(str(exc).split())
        raise MetrobenchError(f"{path}: unreadable scores ({message[:300]}); rescore that run") from None
    missing = [name for name in FILE_SCHEMA.names if name not in table.schema.names]
    if missing:
        raise MetrobenchError(f"{path}: not a metrobench scores file (no column {', '.join(missing[:4])}); "
                              "rescore that run")
    try:
        return table.select(FILE_SCHEMA.names).cast(FILE_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
        raise MetrobenchError(f"{path}: not a metrobench scores file ({' '.join(str(exc).split())[:200]}); "
                              "rescore that run") from None


def read_scores(path: Path | str, *, models: Iterable[str] | None = None) -> pa.Table:
    """All rows under a scores folder, with model and system, in storage order."""
    path = Path(path)
    if not path.is_dir():
        raise MetrobenchError(f"{path}: no scores folder (expected {path}/model=M/system=S/{_FILE_NAME})")
    wanted = set(models) if models is not None else None
    tables = []
    for model, system, file in score_files(path):
        if wanted is not None and model not in wanted:
            continue
        table = _read_file(file)
        tables.append(table.add_column(0, "system", pa.array([system] * table.num_rows, pa.string()))
                      .add_column(0, "model", pa.array([model] * table.num_rows, pa.string())))
    if not tables or sum(t.num_rows for t in tables) == 0:
        raise MetrobenchError(f"{path}: no scores found (expected {path}/model=M/system=S/{_FILE_NAME})")
    return pa.concat_tables(tables).cast(SCHEMA)


def totals_from_table(table: pa.Table, *, fill: str = "zero") -> dict[str, dict[str, list[CaseTotals]]]:
    """model -> system -> per-case totals, cases in stored order."""
    cols = {name: table.column(name).to_pylist()
            for name in ("model", "system", "case_id", "component", "tier", "score", "max")}
    grouped: dict[tuple[str, str, str], list[Component]] = {}
    for i in range(table.num_rows):
        key = (cols["model"][i], cols["system"][i], cols["case_id"][i])
        grouped.setdefault(key, []).append(
            Component(cols["component"][i], cols["tier"][i], cols["score"][i], cols["max"][i]))
    out: dict[str, dict[str, list[CaseTotals]]] = {}
    for (model, system, case_id), components in grouped.items():
        out.setdefault(model, {}).setdefault(system, []).append(
            case_totals(case_id, system, components, fill=fill))
    return out
