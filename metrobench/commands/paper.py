"""The paper layer: ``tables``, ``stats``, ``errata-table``, ``view`` and ``judge-agreement``.

Contract: every command here only reads scores, runs, ratings or judge caches and writes
its ``--out`` (tables, CSV, a static site; ``judge-agreement``: its ``--ratings-out``); the
study config given to ``tables`` (or ``view``: its labels) is merged and validated into a
:class:`~metrobench.study.StudyConfig` by
:func:`~metrobench.commands.common.load_study` (none given: the defaults, no
leaderboard, no students). pandas and matplotlib are imported inside the handlers.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING

from metrobench.commands.common import Subparsers, add_data, at_least_one, open_bench, load_study
from metrobench.errors import MetrobenchError
from metrobench.vocabulary import REPORT_PARTITIONS, WHOLE_IN_REPORTS, report_partition

if TYPE_CHECKING:
    import pandas


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    for add in (_add_tables, _add_stats, _add_errata_table, _add_protocol_options, _add_view, _add_agreement):
        add(sub)


def _write_and_show(frame: pandas.DataFrame, out: Path) -> int:
    """Write a table (CSV and Markdown beside it) and print it."""
    from metrobench.paper.tables import write_table

    write_table(frame, out)
    print(frame.to_string(index=False))
    return 0


def _add_tables(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tables", help="every paper table and figure the present scores allow")
    p.add_argument("--scores", required=True, metavar="DIR")
    p.add_argument("--config", action="append", help="study config file(s), merged in order")
    p.add_argument("--out", default="results", help="folder for tableN.csv/.md and figureN.png")
    p.add_argument("--only", action="append", help="build only this table/figure (e.g. table2); repeatable")
    p.set_defaults(func=cmd_tables)


def cmd_tables(args: argparse.Namespace) -> int:
    from metrobench.paper.report import build_tables

    written, skipped = build_tables(Path(args.scores), load_study(args.config), Path(args.out), only=args.only)
    for path in written:
        print(f"wrote {path}")
    if args.only and not written:   # asked for by name and not made: a job's missing output, said why
        asked = ", ".join(args.only)
        why = "; ".join(skipped) if skipped else "no table or figure has that name"
        raise MetrobenchError(f"tables: --only {asked} built nothing: {why}")
    for message in skipped:
        print(f"skipped {message}")
    return 0


def _add_stats(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("stats", help="statistics over Parquet scores")
    stats_sub = p.add_subparsers(dest="stats_command", required=True, metavar="STAT")
    q = stats_sub.add_parser("bootstrap", help="per-model bootstrap CIs of Tier 1 and composite")
    q.add_argument("--scores", required=True, metavar="DIR")
    q.add_argument("--partition", default="holdout", choices=REPORT_PARTITIONS, type=report_partition)
    q.add_argument("--n-resamples", type=at_least_one, default=5000)
    q.add_argument("--seed", type=int, default=42)
    q.add_argument("--out", required=True, help="CSV")
    q.set_defaults(func=cmd_stats_bootstrap)


def cmd_stats_bootstrap(args: argparse.Namespace) -> int:
    from metrobench.paper.inputs import Model, Resampling
    from metrobench.paper.tables import table9
    from metrobench.scoring.store import read_scores
    from metrobench.stats.cases import load_case_scores
    from metrobench.study import validate_study

    stats = validate_study({"stats": {"n_resamples": args.n_resamples, "seed": args.seed}},
                           [("command line", {})]).stats
    cases = load_case_scores(read_scores(Path(args.scores)))
    models = [Model.single(m) for m in cases.models()]   # every scored run, as the help says
    return _write_and_show(table9(cases, models, Resampling(stats.n_resamples, stats.seed), args.partition),
                           Path(args.out))


def _add_runs_table(sub: Subparsers[argparse.ArgumentParser], name: str, help: str, model_help: str,
                    func: Callable[[argparse.Namespace], int]) -> None:
    """A table command over runs: ``--data``, ``--runs DIR`` (``DIR/<model>/<system>.jsonl``), ``--model``
    (repeatable), ``--out`` CSV."""
    p = sub.add_parser(name, help=help)
    add_data(p)
    p.add_argument("--runs", required=True, metavar="DIR", help="runs folder: DIR/<model>/<system>.jsonl")
    p.add_argument("--model", action="append", required=True, help=model_help)
    p.add_argument("--out", required=True, help="CSV")
    p.set_defaults(func=func)


def _add_errata_table(sub: Subparsers[argparse.ArgumentParser]) -> None:
    _add_runs_table(sub, "errata-table", "headline numbers under each scoring erratum vs the default",
                    "model to rescore (repeatable)", cmd_errata_table)


def cmd_errata_table(args: argparse.Namespace) -> int:
    from metrobench.paper.report import errata_table

    return _write_and_show(errata_table(open_bench(args.data), Path(args.runs), args.model), Path(args.out))


def _add_protocol_options(sub: Subparsers[argparse.ArgumentParser]) -> None:
    _add_runs_table(sub, "protocol-options", "per model: the cases each protocol option changed, and Tier 1 "
                    "with each undone (docs/runner.md, \"The protocol\")", "model run (repeatable)",
                    cmd_protocol_options)


def cmd_protocol_options(args: argparse.Namespace) -> int:
    from metrobench.paper.protocol_options import options_table

    return _write_and_show(options_table(open_bench(args.data), Path(args.runs), args.model), Path(args.out))


def _add_view(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("view", help="a static HTML site of cases: conversations, tool calls, states, scores")
    add_data(p)
    p.add_argument("folder", nargs="?", metavar="EVAL_DIR",
                   help="an eval's folder, results/eval/<model>: its runs/ and scores/ (instead of --runs, --scores)")
    p.add_argument("--runs", metavar="DIR", help="runs folder: DIR/<model>/<system>.jsonl (or .json)")
    p.add_argument("--scores", metavar="DIR", help="Parquet scores of those runs")
    p.add_argument("--model", action="append", help="view this model (repeatable; default: all scored)")
    p.add_argument("--partition", default=WHOLE_IN_REPORTS, choices=REPORT_PARTITIONS, type=report_partition,
                   help="cases to show (default: every scored case)")
    p.add_argument("--out", default="site", help="folder for the site: new, empty or a site view wrote (its "
                                                  "pages are replaced; a folder holding anything else is refused)")
    p.add_argument("--calibration", metavar="SAMPLE", help="a calibration sample (calibration-sample's --out): "
                                                          "adds calibrate.html, the page to rate it on")
    p.add_argument("--config", action="append", help="study config file(s), merged in order: the index names "
                                                     "models by their leaderboard labels")
    p.set_defaults(func=cmd_view)


def cmd_view(args: argparse.Namespace) -> int:
    from metrobench.viewer import build_site
    from metrobench.viewer.labels import leaderboard_labels

    if args.folder:
        if args.runs or args.scores:
            raise MetrobenchError("view: an eval folder or --runs and --scores, not both")
        args.runs, args.scores = f"{args.folder}/runs", f"{args.folder}/scores"
        if not Path(args.runs).is_dir() or not Path(args.scores).is_dir():
            raise MetrobenchError(f"view: {args.folder}: no runs/ and scores/ in it (an eval's folder, "
                                  "results/eval/<model>, holds both)")
    elif not (args.runs and args.scores):
        raise MetrobenchError("view: give an eval's folder (results/eval/<model>) or both --runs and --scores")
    labels = leaderboard_labels(load_study(args.config)) if args.config else None
    site = build_site(Path(args.runs), Path(args.scores), Path(args.out), models=args.model,
                      data=args.data, partition=args.partition, calibration=args.calibration, labels=labels)
    missing = f", {site.without_record} without a transcript record" if site.without_record else ""
    print(f"wrote {site.out}/index.html: {len(site.models)} model(s), {site.case_pages} case pages"
          f"{missing}, {site.compare_pages} side-by-side pages"
          + (", calibrate.html" if args.calibration else ""))
    return 0


def _add_agreement(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("judge-agreement", help="judge calibration: agreement statistics from a ratings CSV, "
                                               "or of two judges from their caches or scored folders")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--ratings", help="CSV: item id, then one column per rater (0/1/2)")
    given.add_argument("--judge-cache", action="append", metavar="JSONL",
                       help="a judge cache (repeatable): each judge model in it is a rater")
    given.add_argument("--scores", action="append", metavar="DIR",
                       help="a scored folder (repeatable): each is a rater, over the components a judge scored")
    p.add_argument("--ratings-out", metavar="CSV", help="with --judge-cache or --scores: write the ratings built "
                                                       "(the CSV --ratings reads)")
    p.add_argument("--n-resamples", type=at_least_one, default=2000)
    p.add_argument("--seed", type=int, default=42)
    p.set_defaults(func=cmd_agreement)


def cmd_agreement(args: argparse.Namespace) -> int:
    from metrobench.stats.agreement import agreement_table

    if args.ratings:
        from metrobench.calibration.table import any_item, read_ratings_csv

        if args.ratings_out:
            raise MetrobenchError("judge-agreement: --ratings-out goes with --judge-cache or --scores")
        # Table 1's reader (issue 51): a repeated rater column or item, UTF-16, `;` are handled alike
        _, ratings = read_ratings_csv(Path(args.ratings), any_item)
        if len(ratings) < 2:
            raise MetrobenchError(f"{args.ratings}: one rater column ({', '.join(ratings)}); agreement needs two")
    else:
        from metrobench.atomic import write_text
        from metrobench.calibration.sources import common, from_caches, from_scores
        from metrobench.calibration.table import ratings_csv

        if args.judge_cache:
            raters, sources = from_caches(args.judge_cache), "the judge caches"
        else:
            raters, sources = from_scores(args.scores), "the scored folders"
        items, ratings = common(raters, sources)
        print(f"{len(items)} case-component items rated by at least two of: {', '.join(raters)}")
        if args.ratings_out:
            columns = {name: dict(zip(items, column)) for name, column in ratings.items()}
            write_text(Path(args.ratings_out), ratings_csv(items, columns))
            print(f"wrote {args.ratings_out}")
    rows = agreement_table(ratings, n_resamples=args.n_resamples, seed=args.seed)
    print(f"{'pair':<28}{'n':>5}{'exact':>8}{'within1':>9}{'kappa_w':>9}  {'95% CI':<17}{'AC2':>6}")
    for r in rows:
        print(f"{r.pair:<28}{r.n:>5}{r.exact:>8.0%}{r.within_one:>9.0%}{r.kappa:>9.2f}  "
              f"[{r.kappa_lo:.2f}, {r.kappa_hi:.2f}]  {r.ac2:>5.2f}")
    return 0
