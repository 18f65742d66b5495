"""Runner overhead and prompt-prefix reuse with a real local model (SmolLM2-135M on llama.cpp).

Serves the model with llama_cpp.server, runs N cases of one system twice —
once in case-file order, once in the runner's cache-friendly order (cases with
the same conditional prompt sections back to back) — and reports:

* harness overhead: the share of wall time spent outside model requests
  (tool calls, prompt building, bookkeeping, transcript writes), from each
  record's ``meta.model_ms`` against the run's wall time (concurrency 1);
* prompt-prefix reuse: the share of prompt tokens the server did not have to
  evaluate, from llama-cpp-python's "prefix-match hit" log lines.

Usage: python benchmarks/runner_overhead.py [--data ROOT] [--system S] [--cases N]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path

from metrobench.data import Benchmark
from metrobench.agents.runner import run as runner
from metrobench.agents.runner.config import load_model_config
from metrobench.agents.serving import serve_model
from metrobench.transcripts.records import read_run

CONFIG = Path(__file__).resolve().parents[1] / "config" / "models" / "smollm2-135m.yaml"
HIT = re.compile(r"(\d+) prefix-match hit, remaining \d+ prompt tokens")
EVAL = re.compile(r"prompt eval time =\s+[\d.]+ ms /\s+(\d+) tokens")


def one(bench: Benchmark, system: str, cases: list, ordered: bool, tmp: Path) -> dict:
    cfg = load_model_config(CONFIG)
    log = tmp / f"server-{ordered}.log"
    out = tmp / f"run-{ordered}.jsonl"
    original = runner.order_for_cache
    if not ordered:
        runner.order_for_cache = lambda cs: list(cs)
    try:
        with serve_model(cfg, log_path=log) as url:
            start = time.perf_counter()
            runner.run_model(cfg, bench.system(system), cases, out, base_url=url,
                             progress_stream=open(os.devnull, "w"))
            wall = time.perf_counter() - start
    finally:
        runner.order_for_cache = original
    records = read_run(out).records
    model_s = sum(r.meta["model_ms"] for r in records) / 1000
    text = log.read_text()
    cached = sum(int(n) for n in HIT.findall(text))
    evaluated = [int(n) for n in EVAL.findall(text)]
    prompt = cached + sum(evaluated)
    return {"wall": wall, "model": model_s, "overhead": (wall - model_s) / wall,
            "cached_share": cached / prompt if prompt else 0.0, "requests": len(evaluated),
            "prompt_tokens": prompt}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("METROBENCH_DATA"))
    parser.add_argument("--system", default="doha")
    parser.add_argument("--cases", type=int, default=8)
    args = parser.parse_args()
    bench = Benchmark.open(args.data)
    all_cases = bench.cases(args.system)
    step = max(1, len(all_cases) // args.cases)
    cases = all_cases[::step][: args.cases]  # spread over the categories
    with tempfile.TemporaryDirectory() as tmp:
        for ordered in (False, True):
            r = one(bench, args.system, cases, ordered, Path(tmp))
            label = "cache-friendly order" if ordered else "case-file order     "
            print(f"{label}: {len(cases)} cases, {r['requests']} requests, wall {r['wall']:.1f} s, "
                  f"in model requests {r['model']:.1f} s, harness overhead {r['overhead']:.2%}, "
                  f"prompt tokens reused from cache {r['cached_share']:.1%} of {r['prompt_tokens']:,}")


if __name__ == "__main__":
    main()
