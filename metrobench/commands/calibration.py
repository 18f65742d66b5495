"""Table 1's commands: ``calibration-sample`` (the pairs to rate) and ``table1`` (their ratings and agreement).

Contract: both read the study config's ``calibration`` section (metrobench/study.py) and the
benchmark; ``calibration-sample`` writes only its ``--out`` (the sample, in the published blind
file's shape), ``table1`` only its ``--out`` CSV, the Markdown beside it, the judges' ratings
CSV beside that and the judge cache it is given. Bad input stops either before it writes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from metrobench.commands.common import Subparsers, _add_data, _bench, load_study


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("calibration-sample", help="Table 1's sample: the published blind pairs, or a draw "
                                                  "from calibration.model's scored runs")
    _add_data(p)
    p.add_argument("--config", action="append", help="study config file(s), merged in order")
    p.add_argument("--scores", metavar="DIR", help="scores folder (calibration.sample: select)")
    p.add_argument("--runs", metavar="DIR", help="runs folder (calibration.sample: select)")
    p.add_argument("--out", required=True, help="the sample's JSON file (replaced)")
    p.set_defaults(func=cmd_sample)


def cmd_sample(args: argparse.Namespace) -> int:
    from collections import Counter

    from metrobench.calibration.sample import published_sample, select_pairs, write_sample
    from metrobench.errors import MetrobenchError

    study = load_study(args.config)
    bench = _bench(args)
    calibration = study.calibration
    if calibration.sample == "published":
        sample = published_sample(bench)
        pairs, source = sample.pairs, sample.source
        if sample.changed:
            print(f"note: {len(sample.changed)} case(s) rewritten since the sample was drawn: "
                  f"{', '.join(sample.changed)}")
    else:
        if not (args.scores and args.runs):
            raise MetrobenchError("calibration-sample: calibration.sample select needs --scores and --runs")
        pairs = select_pairs(bench, args.scores, args.runs, str(calibration.model), study.systems,
                             count=calibration.count, seed=calibration.seed)
        source = f"{calibration.model}'s scored runs (seed {calibration.seed})"
    out = write_sample(pairs, args.out)
    counts = Counter(pair["rubric"] for pair in pairs)
    print(f"wrote {out}: {len(pairs)} pairs from {source}; "
          + ", ".join(f"{rubric} {n}" for rubric, n in sorted(counts.items())))
    return 0
