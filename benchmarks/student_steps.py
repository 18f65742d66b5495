"""How many training steps make a CPU student call the kiosk's tools? (issue 29, item 5)

    python benchmarks/student_steps.py --config config/demo.yaml --student smollm2 \
        --dataset results/teacher/dataset.jsonl --split results/partition.json \
        --steps 2,4,6 --out benchmarks/results/student-steps

For each step count N it trains the student's recipe (or ``--recipe``) for N steps
(``metrobench train --max-steps N``, seed 42), merges, exports and quantises it as the
workflow does, benchmarks it on the config's held-out sample with the config's
``student_serving`` settings (``metrobench bench``), and prints one row: steps, training
seconds, and the protocol columns of :mod:`metrobench.paper.protocol` (share of cases with
an executed tool call, with an accepted submission, mean rounds).
``--adapter LABEL=DIR[:RECIPE]`` adds an adapter trained elsewhere (a checkpoint of the
mini-study, say) as a row of its own, benchmarked the same way.

Every stage is the project's own command; nothing here is a stand-in. Each row's files
stay under ``--out/<label>/`` and a rerun skips the stages whose output exists, so an
interrupted measurement resumes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from metrobench.data import SYSTEMS
from metrobench.paper.protocol import model_records, protocol_row
from metrobench.paper.tables import to_markdown
from metrobench.study import load_study


def _sh(args: list[str], log: Path) -> float:
    """Run one metrobench command, its output to ``log``; seconds it took."""
    start = time.monotonic()
    with log.open("w") as handle:
        done = subprocess.run(args, stdout=handle, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        sys.exit(f"metrobench: error: {' '.join(args[:2])} failed (exit {done.returncode}); see {log}")
    return time.monotonic() - start


def _export(label_dir: Path, recipe: str, adapter: Path) -> Path:
    """merge -> GGUF f16 -> Q4_K_M, as workflow/rules/peft.smk does; the quantised file."""
    quantized = label_dir / "model-Q4_K_M.gguf"
    if not quantized.is_file():
        merged, f16 = label_dir / "merged", label_dir / "model-f16.gguf"
        _sh(["metrobench", "merge", "--recipe", recipe, "--adapter", str(adapter), "--out", str(merged)],
            label_dir / "merge.log")
        _sh(["metrobench", "export-gguf", "--model", str(merged), "--out", str(f16)], label_dir / "gguf.log")
        _sh(["metrobench", "quantize", "--gguf", str(f16), "--out", str(quantized)], label_dir / "quantize.log")
    return quantized


def _bench(label_dir: Path, gguf: Path, model: str, args: argparse.Namespace, sample: int | None) -> Path:
    """The student on the config's held-out sample of every system; the runs folder."""
    runs = label_dir / "runs"
    for system in SYSTEMS:
        out = runs / model / f"{system}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        command = ["metrobench", "bench", "--data", args.data, "--system", system, "--partition", "holdout",
                   "--split", args.split, "--config", args.config, "--model", model, "--gguf", str(gguf),
                   "--no-thinking", "--out", str(out), "--server-log", str(out.with_suffix(".server.log"))]
        if sample:
            command += ["--sample", str(sample)]
        _sh(command, out.with_suffix(".log"))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="study config (its sample, students and student_serving)")
    parser.add_argument("--student", required=True, help="a students: entry of the config (its recipe)")
    parser.add_argument("--dataset", required=True, help="training set (results/teacher/dataset.jsonl)")
    parser.add_argument("--split", required=True, help="results/partition.json")
    parser.add_argument("--data", default=None, help="benchmark root (default: $METROBENCH_DATA)")
    parser.add_argument("--steps", default="", help="comma-separated step counts to train")
    parser.add_argument("--recipe", help="train this recipe instead of the student's")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--adapter", action="append", default=[], metavar="LABEL=DIR[:RECIPE]",
                        help="an adapter trained elsewhere (default recipe: the student's)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.data is None:
        args.data = os.environ.get("METROBENCH_DATA") or sys.exit("metrobench: error: --data or $METROBENCH_DATA")
    study = load_study([args.config])
    recipe = args.recipe or study.students[args.student].recipe
    sample = study.bench.sample
    model = f"{args.student}-peft-s{args.seed}"  # a name the config knows, so bench takes its settings

    rows = []
    for steps in [int(s) for s in args.steps.split(",") if s]:
        label_dir = args.out / f"steps{steps}"
        label_dir.mkdir(parents=True, exist_ok=True)
        adapter, seconds = label_dir / "adapter", None
        if not adapter.is_dir():
            seconds = _sh(["metrobench", "train", "--recipe", recipe, "--dataset", args.dataset,
                           "--seed", str(args.seed), "--max-steps", str(steps), "--out", str(adapter)],
                          label_dir / "train.log")
            (label_dir / "train_seconds.txt").write_text(f"{seconds:.0f}\n")
        elif (label_dir / "train_seconds.txt").is_file():
            seconds = float((label_dir / "train_seconds.txt").read_text())
        runs = _bench(label_dir, _export(label_dir, recipe, adapter), model, args, sample)
        rows.append({"student": f"{steps} steps ({Path(recipe).name})",
                     "train_s": None if seconds is None else round(seconds),
                     **protocol_row(model, model_records(runs, model))})
    for spec in args.adapter:
        label, _, rest = spec.partition("=")
        adapter_dir, _, own_recipe = rest.partition(":")
        label_dir = args.out / label
        label_dir.mkdir(parents=True, exist_ok=True)
        runs = _bench(label_dir, _export(label_dir, own_recipe or recipe, Path(adapter_dir)), model, args, sample)
        rows.append({"student": label, "train_s": None, **protocol_row(model, model_records(runs, model))})
    table = pd.DataFrame(rows).drop(columns=["model"])
    print(to_markdown(table), end="")


if __name__ == "__main__":
    main()
