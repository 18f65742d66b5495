"""How models use the kiosk protocol, from their transcripts: one Markdown row per model.

    python scripts/protocol_stats.py --runs results/runs/holdout --model smollm2-135m-mini --model 135m-peft-s42

The computation is :mod:`metrobench.paper.protocol` (the study's own table is
``results/protocol.csv``, built by ``metrobench tables``); this prints the same
columns for any models' transcripts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from metrobench.errors import MetrobenchError
from metrobench.paper.protocol import model_records, protocol_row
from metrobench.paper.tables import to_markdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="runs folder: DIR/<model>/<system>.jsonl")
    parser.add_argument("--model", action="append", required=True)
    args = parser.parse_args()
    try:
        rows = [protocol_row(model, model_records(args.runs, model)) for model in args.model]
    except MetrobenchError as exc:
        sys.exit(f"metrobench: error: {exc}")
    print(to_markdown(pd.DataFrame(rows)), end="")


if __name__ == "__main__":
    main()
