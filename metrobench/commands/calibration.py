"""Table 1's commands: ``calibration-sample`` (the pairs to rate) and ``table1`` (their ratings and agreement).

Contract: both read the study config's ``calibration`` section (metrobench/study/) and the
benchmark; ``calibration-sample`` writes only its ``--out`` (the sample, in the published blind
file's shape), ``table1`` only its ``--out`` CSV, the Markdown beside it, the judges' ratings
CSV beside that and the judge cache it is given. Bad input stops either before it writes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from metrobench.commands.common import Subparsers, add_data, at_least_one, open_bench, load_study


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("calibration-sample", help="Table 1's sample: the published blind pairs, or a draw "
                                                  "from calibration.model's scored runs")
    add_data(p)
    p.add_argument("--config", action="append", help="study config file(s), merged in order")
    p.add_argument("--scores", metavar="DIR", help="scores folder (calibration.sample: select)")
    p.add_argument("--runs", metavar="DIR", help="runs folder (calibration.sample: select)")
    p.add_argument("--out", required=True, help="the sample's JSON file (replaced)")
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("table1", help="Table 1: the judges rate the sample; agreement of every pair of raters")
    add_data(p)
    p.add_argument("--config", action="append", help="study config file(s), merged in order")
    p.add_argument("--sample", required=True, help="the sample (calibration-sample's --out)")
    p.add_argument("--out", required=True, help="table1.csv (the Markdown is written beside it)")
    p.add_argument("--judge-ratings", help="write the judges' ratings here (id, one column per judge)")
    p.add_argument("--judge-cache", help="judgment cache (default: judge-cache.jsonl beside --sample)")
    p.add_argument("--judge-concurrency", type=at_least_one, default=4)
    p.set_defaults(func=cmd_table1)


def cmd_sample(args: argparse.Namespace) -> int:
    from collections import Counter

    from metrobench.calibration.sample import published_sample, select_pairs, write_sample
    from metrobench.errors import MetrobenchError

    study = load_study(args.config)
    bench = open_bench(args.data)
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


def cmd_table1(args: argparse.Namespace) -> int:
    from metrobench.atomic import write_text
    from metrobench.calibration.judging import judges_of, rate
    from metrobench.calibration.sample import load_sample
    from metrobench.calibration.table import ratings_csv, read_people, table1, write_table1

    study = load_study(args.config)
    bench = open_bench(args.data)
    sample = load_sample(args.sample, bench)
    cache = Path(args.judge_cache) if args.judge_cache else Path(args.sample).with_name("judge-cache.jsonl")
    judges = judges_of(study, cache, args.judge_concurrency)
    # people's ratings are checked before any judge is asked and before anything is written
    people = read_people(study.calibration.ratings, sample.ids, [judge.model for judge in judges])
    judged = {}
    for judge in judges:
        rated = rate(sample.pairs, judge, bench)
        judged[rated.judge] = dict(rated.ratings)
        print(f"judge {judge.model}: {rated.asked} pairs judged ({judge.hits} cached, {judge.misses} new), "
              f"{len(sample.pairs) - rated.asked} scored without a judge call")
    table = table1(sample, people, judged, n_resamples=study.stats.n_resamples, seed=study.stats.seed)
    if args.judge_ratings:
        write_text(Path(args.judge_ratings), ratings_csv(sample.ids, judged))
    out = write_table1(table, args.out, study)
    print(f"wrote {out} and {out.with_suffix('.md')}: {table.kind}, {len(table.frame)} rows")
    return 0
