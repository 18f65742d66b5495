"""How fast the 12-process rule-baseline path could be at best: the libraries' own floor.

``startup_vs_reference.py`` times the rule agent and Tier 1 scoring of all 955
cases as the Snakemake rules run them, one ``metrobench`` process per stage and
system (12 processes). This splits one such process into what it cannot avoid
and what is the project's, by timing processes that do less and less:

* ``python``: the interpreter and its ``site`` (the virtual environment, the
  editable install), nothing imported;
* ``pydantic``: that, plus ``from pydantic import BaseModel`` and one model built
  (what any command that validates its input pays before its own first model);
* ``pydantic+pyarrow``: that, plus ``import pyarrow.parquet`` with numpy hidden,
  as ``metrobench score`` imports it (``metrobench/arrow.py``);
* ``rule-agent imports`` / ``score imports``: the modules the two commands import
  (models built, nothing run);
* ``rule-agent`` / ``score``: the commands themselves, averaged over the six
  systems.

The floor of the 12-process path is six ``pydantic`` processes plus six
``pydantic+pyarrow`` ones: no benchmark data read, no case run, not one of the
project's own modules imported. ``--reference-seconds`` (the reference harness's
median from ``startup_vs_reference.py`` on the same machine) turns each total
into a ratio, so the floor's ratio is the best any 12-process path built on
pydantic and pyarrow can show there.

Usage:

    python benchmarks/startup_floor.py [--data ROOT] [--repeat 5] [--reference-seconds 21.49]

Recorded on 2026-12-02 on the 2-core development machine of
``startup_vs_reference.py``'s figures (AMD EPYC, no other load), best of 9
repeats, against that script's reference median there, 21.49 s (README,
Benchmarks):

    python:               0.023 s a process
    pydantic:             0.127 s
    pydantic+pyarrow:     0.186 s
    rule-agent imports:   0.208 s
    score imports:        0.231 s
    rule-agent:           0.286 s   (a process, averaged over the six systems)
    score:                0.290 s
    12-process floor:     1.88 s   = 11.5x the reference
    12-process imports:   2.63 s   =  8.2x
    12-process path:      3.46 s   =  6.2x

(An earlier run the same hour: floor 1.87 s, path 3.26 s = 6.6x. These are
best-of figures, below ``startup_vs_reference.py``'s medians of whole runs.)
So pydantic and pyarrow alone, with nothing done, leave room for 11.5x: 10x
(2.15 s) would allow the project 0.27 s over all twelve processes, 23 ms a
process, for its own imports (the 61 models, the tools, the scorer: 0.08 s in
``rule-agent``, 0.05 s in ``score``) and for reading, validating, running or
scoring and writing a system's cases (0.08 s and 0.06 s). The 12-process
path cannot reach 10x on this machine while each process validates with
pydantic and writes Parquet with pyarrow; ``rule-agent`` and ``score`` given all
six systems (2 processes) are 14-17x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from metrobench.data import SYSTEMS

ROOT = Path(__file__).resolve().parents[1]

NO_NUMPY = "import sys; sys.modules['numpy'] = None; "
ONE_MODEL = "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int\nM(x=1)\n"
FLOORS = {
    "python": "pass",
    "pydantic": ONE_MODEL,
    "pydantic+pyarrow": NO_NUMPY + ONE_MODEL + "import pyarrow.parquet",
    "rule-agent imports": ("import metrobench.cli, metrobench.commands.common, metrobench.agents.rule_agent, "
                           "metrobench.transcripts.records, metrobench.scoring.names"),
    "score imports": NO_NUMPY + ("import metrobench.cli, metrobench.commands.common, metrobench.scoring.runs, "
                                 "metrobench.scoring.errata, metrobench.scoring.judge, metrobench.data.partition, pyarrow.parquet"),
}


def _wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def _processes(data: list[str], tmp: Path) -> dict[str, list[list[str]]]:
    """Each row's commands: one for a floor, the six systems' for a command."""
    python, metrobench = [sys.executable], [sys.executable, "-m", "metrobench"]
    rows = {name: [python + ["-c", code]] for name, code in FLOORS.items()}
    runs = {system: str(tmp / f"{system}.jsonl") for system in SYSTEMS}
    rows["rule-agent"] = [metrobench + ["rule-agent", *data, "--system", s, "--out", runs[s]] for s in SYSTEMS]
    rows["score"] = [metrobench + ["score", *data, "--run", runs[s], "--out", str(tmp)] for s in SYSTEMS]
    return rows


def best_walls(data: list[str], repeat: int) -> dict[str, float]:
    """A row's seconds a process: each command's fastest repeat (noise only adds, and a floor
    asks what is possible), averaged over a command's systems. The repeats go round all the
    rows in turn, so that a busy moment of the machine does not fall on one row only."""
    with tempfile.TemporaryDirectory() as tmp:
        rows = _processes(data, Path(tmp))
        walls = {name: [[] for _ in commands] for name, commands in rows.items()}
        for _ in range(repeat):
            for name, commands in rows.items():
                for i, command in enumerate(commands):
                    walls[name][i].append(_wall(command))
    return {name: statistics.fmean(min(times) for times in per_command) for name, per_command in walls.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("METROBENCH_DATA"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reference-seconds", type=float,
                        help="the reference harness's median on this machine (startup_vs_reference.py)")
    args = parser.parse_args()
    data = ["--data", args.data] if args.data else []
    # The package's bytecode first, as make writes it (PYTHONDONTWRITEBYTECODE keeps none).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "metrobench")], check=True)
    seconds = best_walls(data, args.repeat)
    for name, value in seconds.items():
        print(f"{name + ':':<21} {value:.3f} s")
    totals = {"12-process floor": 6 * (seconds["pydantic"] + seconds["pydantic+pyarrow"]),
              "12-process imports": 6 * (seconds["rule-agent imports"] + seconds["score imports"]),
              "12-process path": 6 * (seconds["rule-agent"] + seconds["score"])}
    for name, total in totals.items():
        ratio = f"   = {args.reference_seconds / total:.1f}x the reference" if args.reference_seconds else ""
        print(f"{name + ':':<21} {total:.2f} s{ratio}")


if __name__ == "__main__":
    main()
