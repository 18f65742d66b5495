"""The GPU kit's one table: every step of run.sh, measured, failed or skipped, with its figures.

    python scripts/gpu-kit/table.py OUT WALL_SECONDS BUDGET_SECONDS

Reads ``OUT/steps.tsv`` (name, status, why, seconds: written by run.sh),
``OUT/runs/<name>.json`` (benchmarks/real_width_qlora.py's records),
``OUT/device.json`` and ``OUT/kit.json``; writes ``OUT/table.md`` and
``OUT/results.json`` (every record in full). A step without a record is shown
with its status and reason, so a short budget leaves a visible gap, never a
silent one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HEAD = ("step", "shape", "status", "peak allocated GiB", "peak reserved GiB", "peak in use GiB (total - min free)",
        "s / step (or fwd+bwd)", "LoRA dtype (built / first step / end)", "gated-delta ran", "s")


def _f(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def row(name: str, status: str, why: str, seconds: str, record: dict[str, Any] | None) -> list[str]:
    if record is None:
        return [name, "-", f"{status}{': ' + why if why else ''}", "-", "-", "-", "-", "-", "-", seconds]
    shape = f"{record['seq']} x {record['batch']}" + ("" if record["width"] == "real" else " (tiny width)")
    ran = record.get("gated_delta_ran", "-")
    if record["kind"] == "layer":
        return [name, shape, status, _f(record.get("max_allocated_gib")), "-", "-",
                _f(record["mean_seconds"], 3), "-", ran, seconds]
    memory = record.get("memory", {})
    steps = record.get("step_seconds") or []
    dtypes = " / ".join(",".join(record.get(k) or ["?"]) for k in
                        ("adapter_dtypes_built", "adapter_dtypes_first_step", "adapter_dtypes"))
    if record.get("lora_dtype", {}).get("cast_by"):
        dtypes += " (cast by the script)"
    peak = memory.get("max_allocated_gib")
    in_use = memory.get("peak_in_use_gib")
    if peak is None and "max_rss_gib" in memory:
        peak, in_use = None, memory["max_rss_gib"]           # the CPU: resident memory, not device memory
    return [name, shape, status, _f(peak), _f(memory.get("max_reserved_gib")),
            _f(in_use) + (" (RSS)" if "max_rss_gib" in memory else ""),
            " / ".join(_f(s, 1) for s in steps) or "-", dtypes, ran, seconds]


def main(argv: list[str]) -> int:
    out, wall, budget = Path(argv[0]), argv[1], argv[2]
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines() if line.strip()]
    device = json.loads((out / "device.json").read_text()) if (out / "device.json").is_file() else {}
    kit = json.loads((out / "kit.json").read_text()) if (out / "kit.json").is_file() else None
    records, rows = [], []
    for name, status, why, seconds in steps:
        path = out / "runs" / f"{name}.json"
        record = json.loads(path.read_text()) if status == "ok" and path.is_file() else None
        records.append({"step": name, "status": status, "why": why, "seconds": int(seconds), "record": record})
        rows.append(row(name, status, why, seconds, record))
    done = sum(r["status"] == "ok" for r in records)
    lines = [f"# GPU kit: {device.get('device', '?')} (torch {device.get('torch', '?')}, CUDA "
             f"{device.get('torch_cuda')}, {device.get('memory_gib')} GiB)", "",
             f"{done} of {len(records)} steps measured in {wall} s (budget {budget} s). Random weights at the "
             "real Qwen3.5 widths (scripts/gpu-kit/configs), NF4 with double quantisation, the recipe's "
             "max_length and micro-batch, two optimiser steps through metrobench.training.train.build_trainer. "
             "Peaks are of the training phase; 'in use' is the device's total less the lowest free memory seen "
             "(CUDA context and paged optimiser included).", "",
             "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
    skipped = [r["step"] for r in records if r["status"] != "ok"]
    if skipped:
        lines += ["", f"Not measured: {', '.join(skipped)} (status column)."]
    (out / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "results.json").write_text(json.dumps({"device": device, "kit": kit, "wall_seconds": int(wall),
                                                  "budget_seconds": int(budget), "steps": records},
                                                 indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
