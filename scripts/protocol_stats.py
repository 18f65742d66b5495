"""How models use the kiosk protocol, from their transcripts: one Markdown row per model.

    python scripts/protocol_stats.py --runs results/runs --model smollm2-135m-mini --model 135m-peft-s42

Per model, over its recorded cases: the share with at least one executed tool call (the
tool ran, whatever it answered, a 422 included; arguments that could not be read do not
count), the share with an accepted submission, the mean number of model rounds, and the
share that ended on an error (budget exhausted, truncation, endpoint failure).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from metrobench.transcripts.records import read_run

#: Errors the runner gives a call it could not run (loop.parse_arguments, tool_parsing).
UNREAD = ("arguments are not valid JSON", "arguments must be a JSON object", "tool call block is not valid JSON")


def executed(call: dict) -> bool:
    return not (call.get("error") or "").startswith(UNREAD)


def row(runs: Path, model: str) -> str:
    records = [r for path in sorted((runs / model).glob("*.jsonl")) for r in read_run(path).records]
    if not records:
        raise SystemExit(f"metrobench: error: {runs / model}: no transcripts")
    n = len(records)
    called = sum(any(executed(c) for c in r.tool_calls_made) for r in records)
    accepted = sum(r.response is not None and any(c["name"] == "submit_assistant_state" and c.get("error") is None
                                                  for c in r.tool_calls_made) for r in records)
    rounds = sum(r.api_rounds for r in records) / n
    errors = sum(r.error is not None for r in records)
    return (f"| {model} | {n} | {100 * called / n:.1f} % | {100 * accepted / n:.1f} % | {rounds:.2f} "
            f"| {100 * errors / n:.1f} % |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="runs folder: DIR/<model>/<system>.jsonl")
    parser.add_argument("--model", action="append", required=True)
    args = parser.parse_args()
    print("| model | cases | ≥ 1 executed tool call | accepted submission | mean rounds | ended on an error |")
    print("|---|---|---|---|---|---|")
    for model in args.model:
        print(row(args.runs, model))


if __name__ == "__main__":
    main()
