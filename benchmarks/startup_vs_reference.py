"""The rule baseline through the command line, side by side with the reference harness.

The workflow runs one process per (stage, system), so for small stages the
imports, not the work, set the pace. This times the same job — the rule agent
on all 955 cases, then Tier 1 scoring of them — three ways, alternating, on the
same machine:

* ``reference``: the reference harness as its REPRODUCING.md runs it, per
  system a tool server (``harness.mock_server``), ``harness.rule_agent`` against
  it over HTTP and ``harness.scorer --no-judge`` (18 processes);
* ``cli-12``: ``metrobench rule-agent`` and ``metrobench score`` once per
  system (12 processes, what the Snakemake rules do);
* ``cli-2``: the same two commands once each, all six systems in one process
  (``rule-agent --system … --out runs/{system}.jsonl``, ``score --run …``).

Usage (a checkout of the reference, github.com/continker/metrollm-bench at the
pinned commit, and a Python that has its dependencies):

    python benchmarks/startup_vs_reference.py --reference ../metrollm-bench \\
        --reference-python ../refvenv/bin/python [--data ROOT] [--repeat 3]

Both trees' bytecode is written first (``compileall``), as a first run writes it
on an ordinary machine; where ``PYTHONDONTWRITEBYTECODE`` is set, as on the
development machine, neither would keep any. It prints the wall time of each
repeat and the medians; the ratio is the reference's median over each CLI
path's. Recorded on 2026-12-02 on a 2-core development machine (AMD EPYC, no
other load), medians of 3, reference on Python 3.11 with its pyproject's
dependencies (README, Benchmarks):

    reference: median 21.49 s
       cli-12: median 4.15 s, 5.2x faster
        cli-2: median 1.26 s, 17.1x faster

The code before ``score`` imported pyarrow without numpy and before ``make``
wrote the package's bytecode, with this script's own predecessor on the same
machine: reference 20.90 s, cli-12 5.35 s = 3.9x, cli-2 1.75 s = 11.9x. (On the
slower machine of 2026-12-01: 44.55 s, 10.86 s = 4.1x, 3.34 s = 13.3x.) What is
left in cli-12 is 0.35 s a process, most of it importing pydantic (about 0.1 s),
building its models and importing pyarrow (0.1 s without numpy); the 10x goal
would need 0.18 s a process. ``startup_floor.py`` measures that floor: twelve
processes that import the two libraries and do nothing else are 11.5x, so 10x
leaves 23 ms a process for everything the project imports and does.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from metrobench.data import SYSTEMS

METROBENCH = [sys.executable, "-m", "metrobench"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_up(url: str, server: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the reference tool server exited ({server.returncode})")
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError as exc:
            if getattr(exc, "code", None):   # an HTTP error status: the server answers
                return
            time.sleep(0.05)
    raise SystemExit(f"the reference tool server did not come up at {url}")


def reference(ref: Path, python: str, out: Path) -> None:
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": ref}
    for system in SYSTEMS:
        port = _free_port()
        server = subprocess.Popen([python, "-m", "harness.mock_server", "--system", system, "--port", str(port)],
                                  **quiet)
        try:
            _wait_up(f"http://127.0.0.1:{port}/health", server)
            run, scored = out / f"rule_{system}.json", out / f"rule_{system}_scored.json"
            subprocess.run([python, "-m", "harness.rule_agent", "--cases", f"cases/{system}_cases.json",
                            "--system", system, "--mock-url", f"http://127.0.0.1:{port}", "--output", str(run)],
                           check=True, **quiet)
            subprocess.run([python, "-m", "harness.scorer", "--system", system, "--results", str(run),
                            "--output", str(scored), "--no-judge"], check=True, **quiet)
        finally:
            server.terminate()
            server.wait()


def cli_per_system(data: list[str], out: Path) -> None:
    for system in SYSTEMS:
        subprocess.run(METROBENCH + ["rule-agent", *data, "--system", system, "--out",
                                     str(out / "runs" / f"{system}.jsonl")], check=True, stdout=subprocess.DEVNULL)
    for system in SYSTEMS:
        subprocess.run(METROBENCH + ["score", *data, "--run", str(out / "runs" / f"{system}.jsonl"),
                                     "--out", str(out / "scores")], check=True, stdout=subprocess.DEVNULL)


def cli_one_process_each(data: list[str], out: Path) -> None:
    systems = [a for s in SYSTEMS for a in ("--system", s)]
    subprocess.run(METROBENCH + ["rule-agent", *data, *systems, "--out", str(out / "runs" / "{system}.jsonl")],
                   check=True, stdout=subprocess.DEVNULL)
    runs = [a for s in SYSTEMS for a in ("--run", str(out / "runs" / f"{s}.jsonl"))]
    subprocess.run(METROBENCH + ["score", *data, *runs, "--out", str(out / "scores")], check=True,
                   stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, type=Path, help="a checkout of the reference harness")
    parser.add_argument("--reference-python", required=True, help="a Python with the reference's dependencies")
    parser.add_argument("--data", default=os.environ.get("METROBENCH_DATA"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = ["--data", args.data] if args.data else []
    paths = {"reference": lambda out: reference(args.reference.resolve(), args.reference_python, out),
             "cli-12": lambda out: cli_per_system(data, out),
             "cli-2": lambda out: cli_one_process_each(data, out)}
    # Both trees' bytecode first, as a first run writes it on an ordinary machine: where
    # PYTHONDONTWRITEBYTECODE is set (this development machine), neither would otherwise
    # keep any, and every process of either would compile its sources again.
    subprocess.run([args.reference_python, "-m", "compileall", "-q", "harness"], cwd=args.reference, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parents[1] / "metrobench")],
                   check=True)
    times: dict[str, list[float]] = {name: [] for name in paths}
    for repeat in range(args.repeat):
        for name, job in paths.items():   # alternating, so that a busy moment does not favour one path
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                job(Path(tmp))
                times[name].append(time.perf_counter() - start)
            print(f"repeat {repeat + 1}: {name} {times[name][-1]:.2f} s", flush=True)
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, median in medians.items():
        ratio = medians["reference"] / median
        print(f"{name:>9}: median {median:.2f} s" + ("" if name == "reference" else f", {ratio:.1f}x faster"))


if __name__ == "__main__":
    main()
