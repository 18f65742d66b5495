"""Does the fast suite notice a one-line change to the scorer, the tools or the tables?

Each mutant below is one edit that once survived the whole suite (issue 15's
list: partial credits one point off, a rank threshold's ``>=`` made ``>``, a
field dropped from a tool's answer). For each, this copies the tracked tree to a
temporary folder, applies the edit there (the working tree is never touched),
runs ``pytest -m "not slow"`` against the copy (after one unchanged copy, which
must pass) and reports whether some test
failed ("killed") or all passed ("survived"). Exit status 1 if any survived.

Usage:

    python scripts/check_mutants.py [--data ROOT] [MUTANT ...]

Recorded on 2026-12-02 on the 2-core development machine
(``python scripts/check_mutants.py``): all six killed, 4 min 19 s in all (the
unchanged copy's full fast suite, then each mutant until its first failing
test). A harmless edit (a comment added to a line of ``station_info``) survives,
as it should: checked by hand with ``run_suite``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    before: str
    after: str


MUTANTS = (
    Mutant("tool_calls_correct partial 5->4", "metrobench/scoring/components.py",
           '        return 5, f"Called {sorted(called)}, expected {sorted(acceptable)}"\n    elif category == "J":',
           '        return 4, f"Called {sorted(called)}, expected {sorted(acceptable)}"\n    elif category == "J":'),
    Mutant("re_planning_efficiency 3->2", "metrobench/scoring/components.py",
           'return 3, "Re-called route_planner but without restrictions"',
           'return 2, "Re-called route_planner but without restrictions"'),
    Mutant("disruption_detected 8->7", "metrobench/scoring/components.py",
           'return 8, "Mentioned the disruption without calling disruption_feed"',
           'return 7, "Mentioned the disruption without calling disruption_feed"'),
    Mutant("accessibility_accuracy partial 3->2", "metrobench/scoring/components.py",
           "        elif found:\n            score += 3\n", "        elif found:\n            score += 2\n"),
    Mutant("table 2 rank threshold >= -> >", "metrobench/paper/tables.py",
           '"ranked": endings >= threshold', '"ranked": endings > threshold'),
    Mutant("station_info exits without zone", "metrobench/kiosk/tools/functions.py",
           '"type": station.get("type"), "zone": station.get("zone")}', '"type": station.get("type")}'),
)


def _copy_tree(dest: Path) -> None:
    """The tracked files (and untracked ones git does not ignore), as CI's clean clone has them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def run_suite(mutant: Mutant | None, data: str) -> bool:
    """True if the fast suite passes on a copy of the tree with ``mutant`` (if any) applied."""
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        if mutant is not None:
            target = tree / mutant.path
            text = target.read_text()
            if text.count(mutant.before) != 1:
                raise SystemExit(f"{mutant.name}: the line to change is not in {mutant.path} exactly once; "
                                 "update the mutant")
            target.write_text(text.replace(mutant.before, mutant.after))
        # The copy ahead of the editable install; the data from where the checkout's tests find it.
        env = {**os.environ, "PYTHONPATH": str(tree), "METROBENCH_DATA": data}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "not slow", "-x", "-q", "-p", "no:cacheprovider"],
                              cwd=tree, env=env, capture_output=True, text=True)
        if proc.returncode not in (0, 1):   # 1: tests failed; anything else: the run itself did not work
            raise SystemExit(f"pytest exited {proc.returncode} on the copy:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return proc.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("METROBENCH_DATA",
                                                         str(ROOT.parent / "shared" / "metrollm-bench")))
    parser.add_argument("mutants", nargs="*", help="names (substrings) of the mutants to run; all by default")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.mutants or any(s in m.name for s in args.mutants)]
    if not run_suite(None, args.data):
        raise SystemExit("the fast suite fails on an unchanged copy of the tree; nothing to measure")
    survived = 0
    for mutant in chosen:
        killed = not run_suite(mutant, args.data)
        survived += not killed
        print(f"{'killed' if killed else 'SURVIVED'}: {mutant.name}", flush=True)
    sys.exit(1 if survived else 0)


if __name__ == "__main__":
    main()
