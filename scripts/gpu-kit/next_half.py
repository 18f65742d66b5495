"""Which half of the GPU kit `run.sh` measures when it is not told: the one the repository lacks.

The training half (QLoRA at the real widths) was measured on an H200 and is recorded under
benchmarks/recorded/; the serving half (`serve.sh`: llama-server's memory and tokens a second) is
not until a serving table with a figure from ``nvidia-smi`` is recorded there
(:func:`metrobench.footprint.measured.recorded_tables`; a table from ``serve.sh --cpu`` has no such
figure and does not count). So a lent GPU's few minutes go to what has never been measured: the
serving half while none is recorded, the training half after.

    python scripts/gpu-kit/next_half.py [RECORDED]     # prints "serve" or "train", then why

Runs on the bare GPU image before the kit is installed: it needs only the standard library and the
project's footprint package (no pydantic).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from metrobench.footprint.measured import RECORDED, read_table, recorded_tables  # noqa: E402


def next_half(root: Path) -> tuple[str, str]:
    """``("serve" | "train", why)``: serving until a GPU-measured serving table is under ``root``."""
    for table in recorded_tables(root):
        if any(row.nvidia_smi_mib is not None for row in read_table(table)):
            return "train", f"a serving table measured on a GPU is recorded ({table})"
    return "serve", f"no serving table measured on a GPU is recorded under {root} yet"


def main(argv: list[str]) -> int:
    half, why = next_half(Path(argv[0]) if argv else RECORDED)
    print(half)
    print(why)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
