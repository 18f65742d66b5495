"""Rule baseline end to end: run all 955 cases, score them, write Parquet, print the headline.

What the reference needs about 64 s for on this machine (six tool-server
processes, HTTP per call, one scorer process per system) runs here in one
process with in-process tools. Two ways to measure:

* ``python benchmarks/baseline_e2e.py`` — the stages in one process (imports
  included), wall time per stage and peak resident memory;
* ``--cli`` — the same work through the ``metrobench`` commands a Snakemake
  rule runs (6 x rule-agent, one score, one summary), each a fresh process.

Usage: python benchmarks/baseline_e2e.py [--data ROOT] [--cli]
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402


def in_process(data: str | None) -> None:
    from metrobench.data import SYSTEMS, Benchmark
    from metrobench.agents.rule_agent import run_cases
    from metrobench.data.partition import load_split
    from metrobench.scoring.scorer import Scorer
    from metrobench.scoring.store import read_scores, write_scores
    from metrobench.scoring.summary import summarise, summary_text

    imported = time.perf_counter()
    bench = Benchmark.open(data)
    split = load_split(bench, None)
    stages = {"run": 0.0, "score": 0.0, "write": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        for system in SYSTEMS:
            t = time.perf_counter()
            cases = bench.cases(system)
            records = list(run_cases(bench.system(system), cases))
            stages["run"] += time.perf_counter() - t
            t = time.perf_counter()
            scores = Scorer(bench.system(system)).score([c.raw for c in cases], records)
            stages["score"] += time.perf_counter() - t
            t = time.perf_counter()
            write_scores(Path(tmp), "rule-agent", system, scores, split)
            stages["write"] += time.perf_counter() - t
        t = time.perf_counter()
        [summary] = summarise(read_scores(Path(tmp)), "holdout")
        stages["summary"] = time.perf_counter() - t
    total = time.perf_counter() - START
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(summary_text(summary))
    print(f"\nimports {imported - START:.2f} s; " + "; ".join(f"{k} {v:.2f} s" for k, v in stages.items()))
    print(f"wall time {total:.2f} s, peak RSS {peak_mib:.0f} MiB")


def via_cli(data: str | None) -> None:
    exe = [sys.executable, "-m", "metrobench"]
    extra = ["--data", data] if data else []
    from metrobench.data import SYSTEMS

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        for system in SYSTEMS:
            subprocess.run(exe + ["rule-agent", *extra, "--system", system,
                                  "--out", f"{tmp}/runs/{system}.jsonl"], check=True, stdout=subprocess.DEVNULL)
        runs = [a for s in SYSTEMS for a in ("--run", f"{tmp}/runs/{s}.jsonl")]
        subprocess.run(exe + ["score", *extra, *runs, "--out", f"{tmp}/scores"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(exe + ["summary", "--scores", f"{tmp}/scores"], check=True)
        print(f"\nwall time through the CLI (8 processes): {time.perf_counter() - t:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("METROBENCH_DATA"))
    parser.add_argument("--cli", action="store_true")
    args = parser.parse_args()
    (via_cli if args.cli else in_process)(args.data)


if __name__ == "__main__":
    main()
