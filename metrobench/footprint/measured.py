"""The serving kit's recorded memory table, held against the footprint's serving estimate.

Contract: a recorded measurement is a CSV file anywhere under ``benchmarks/recorded/`` whose header
holds every column of :data:`COLUMNS` (the table ``scripts/gpu-kit/serve.sh`` writes): a Qwen3.5
``size`` (``2b``, ``27B``, ``35b-a3b`` or ``qwen3.5-27b``), the ``quant`` served (``Q4_K_M``), the
server's ``n_ctx`` over its ``slots``, the memory llama-server reported (``server_reported_mib``) and
the memory ``nvidia-smi`` saw in use (``nvidia_smi_mib``), and the kit's own estimate
(``estimate_mib``); more columns may follow, and rows with none of these (the kit's other steps) are
passed over. :func:`recorded_tables` finds them, :func:`read_table`
reads one (a missing column, an empty size or quant, a figure that is not a positive number: one
:class:`~metrobench.errors.MetrobenchError` naming the file, the line and the column; an empty memory
cell is a step the kit skipped, and such a row is not checked).

:func:`shape_estimate` is the footprint's estimate today for a row's shape
(:func:`~metrobench.footprint.serving.serving_estimate`: the size's widths from the architecture
table, the file's bytes from its parameters and the quant's bits a weight, the row's ``n_ctx`` and
``slots``, and the paper's serving: one unified KV pool, f16 cache, every layer on the GPU).
:func:`problem` words a row outside the margin, which is stated here:

* the estimate may fall short of what ``nvidia-smi`` saw by at most :data:`SHORT_GIB` (1 GiB, the
  ``gpu.headroom_gib`` every card keeps free beside an estimate: a larger shortfall is a row the
  plan lets start that then fails to allocate on the card);
* it may exceed it by at most :data:`OVER_FRACTION` (15 %): a larger excess refuses contexts the
  card would hold (the 27B rows were cut from 262,144 to 196,608 tokens on the estimate).

Why the test reads a file: no GPU measurement is in the repository yet; once the kit's table is
recorded the test holds every future edit of the estimate to it, and skips, saying so, until then.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from metrobench.errors import MetrobenchError
from metrobench.footprint import GIB
from metrobench.footprint.architectures import BITS_PER_WEIGHT, table_arch
from metrobench.footprint.serving import ServingEstimate, serving_estimate

RECORDED = Path("benchmarks/recorded")
COLUMNS = ("size", "quant", "n_ctx", "slots", "server_reported_mib", "nvidia_smi_mib", "estimate_mib")
#: What makes a row of the kit's table a memory row: a size or a memory figure (the kit's table has other steps).
MEMORY_ROW = ("size", "server_reported_mib", "nvidia_smi_mib", "estimate_mib")
SHORT_GIB = 1.0
OVER_FRACTION = 0.15
MIB = 2**20


@dataclass(frozen=True)
class MeasuredServing:
    """One row of a recorded memory table."""

    file: str
    line: int
    size: str
    quant: str
    n_ctx: int
    slots: int
    server_reported_mib: float | None       # None: the kit skipped the step (an empty cell)
    nvidia_smi_mib: float | None
    estimate_mib: float | None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line} ({self.size} {self.quant}, n_ctx {self.n_ctx:,}, {self.slots} slots)"


def recorded_tables(root: Path = RECORDED) -> list[Path]:
    """Every CSV under ``root`` whose header holds all of :data:`COLUMNS`, in path order."""
    found = []
    for path in sorted(root.rglob("*.csv")) if root.is_dir() else []:
        with path.open(newline="") as handle:
            header = next(csv.reader(handle), [])
        if set(COLUMNS) <= {name.strip() for name in header}:
            found.append(path)
    return found


def read_table(path: Path) -> list[MeasuredServing]:
    """The rows of one recorded memory table (see the module docstring)."""
    rows = []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = {name.strip() for name in reader.fieldnames or []}
        missing = [name for name in COLUMNS if name not in header]
        if missing:
            raise MetrobenchError(f"{path}: not a serving memory table: no column {', '.join(missing)}")
        for line, raw in enumerate(reader, start=2):
            row = {key.strip(): (value or "").strip() for key, value in raw.items() if key}
            if not any(row[column] for column in MEMORY_ROW):
                continue        # another step of the kit's table (a write, a speed, side by side): no memory row
            rows.append(_row(path, line, row))
    return rows


def _row(path: Path, line: int, row: dict[str, str]) -> MeasuredServing:
    def number(column: str) -> float:
        try:
            value = float(row[column])
        except ValueError:
            raise MetrobenchError(f"{path}:{line}: column {column}: {row[column]!r} is not a number") from None
        if not 0 < value < float("inf"):
            raise MetrobenchError(f"{path}:{line}: column {column}: {row[column]!r} is not a positive figure")
        return value

    def measured(column: str) -> float | None:
        return number(column) if row[column] else None

    for column in ("size", "quant"):
        if not row[column]:
            raise MetrobenchError(f"{path}:{line}: column {column} is empty")
    n_ctx, slots = number("n_ctx"), number("slots")
    if n_ctx != int(n_ctx) or slots != int(slots):
        raise MetrobenchError(f"{path}:{line}: n_ctx and slots are whole numbers")
    return MeasuredServing(str(path), line, row["size"], row["quant"].upper(), int(n_ctx), int(slots),
                           measured("server_reported_mib"), measured("nvidia_smi_mib"), measured("estimate_mib"))


def model_name(size: str) -> str:
    """A row's size as the architecture table names it: ``27B`` -> ``qwen3.5-27b``."""
    key = size.strip().lower()
    return key if key.startswith("qwen") else f"qwen3.5-{key}"


def shape_estimate(row: MeasuredServing) -> ServingEstimate:
    """The footprint's estimate for the row's shape (see the module docstring); a size the architecture
    table does not have, or a quant with no bits a weight, is a MetrobenchError naming the row."""
    name = model_name(row.size)
    arch = table_arch(f"{name}-{row.quant}.gguf")
    if arch is None:
        raise MetrobenchError(f"{row.where}: no architecture table entry for {name}")
    bits = BITS_PER_WEIGHT.get(row.quant)
    if bits is None:
        raise MetrobenchError(f"{row.where}: no bits a weight for quant {row.quant}")
    file_bytes = arch.params_b * 1e9 * bits / 8
    return serving_estimate(arch, file_bytes, row.n_ctx, row.slots, kv_unified=True, weights_from="parameters",
                            quant=row.quant)


def problem(row: MeasuredServing) -> str | None:
    """Why the footprint's estimate for ``row`` is outside the margin of what nvidia-smi saw, else None
    (also when nvidia-smi's figure is missing: the kit skipped that step, nothing to hold it to)."""
    if row.nvidia_smi_mib is None:
        return None
    estimate = shape_estimate(row).total
    seen = row.nvidia_smi_mib * MIB / GIB
    if estimate < seen - SHORT_GIB:
        return (f"{row.where}: the estimate {estimate:.2f} GiB is {seen - estimate:.2f} GiB short of the "
                f"{seen:.2f} GiB nvidia-smi saw (at most {SHORT_GIB:g} GiB, the card's headroom)")
    if estimate > seen * (1 + OVER_FRACTION):
        return (f"{row.where}: the estimate {estimate:.2f} GiB is {estimate / seen - 1:.0%} above the "
                f"{seen:.2f} GiB nvidia-smi saw (at most {OVER_FRACTION:.0%})")
    return None
