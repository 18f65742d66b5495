"""``metrobench plan TARGET...``: jobs, case runs, GPU-hours and API tokens of a Snakemake plan.

Contract: run in the workflow's folder; prints one table (stage, model, jobs, case
runs, GPU-hours, API input and output tokens, each row's peak GPU memory and whether
it fits the configured card, totals) and the disk the plan needs, for the dry run of the
targets on the config files (``--configfile``, default ``config/config.yaml``,
``--config KEY=VALUE`` passed through as Snakemake reads them). The logic and the
sources of its numbers are :mod:`metrobench.plan`'s. Before the table, on stderr, one
``metrobench: warning:`` line for each served row whose ``max_tokens`` cannot be generated
within its ``timeout_s`` at the config's decode rate (:func:`metrobench.plan.timeout_warnings`);
the plan still exits 0, since the row runs, only its longest replies time out. After the table:
each throughput entry the plan was priced with and where its figures come from (measured, scaled,
published or guess: :func:`metrobench.plan.rate_sources`), then the makespan of its GPU jobs on the
configured card, one at a time and packed by memory (:mod:`metrobench.footprint.schedule`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from metrobench.commands.common import Subparsers

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from metrobench.plan import PlanRow as Row
    from metrobench.study import StudyConfig


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="what the Snakemake plan of these targets costs: jobs, case runs, "
                                    "GPU-hours, API tokens (and, after a run, the measured hours)")
    p.add_argument("targets", nargs="+", metavar="TARGET", help="files or rules, as given to snakemake")
    p.add_argument("--configfile", nargs="+", metavar="FILE", help="study config file(s), merged in order "
                   "(default: config/config.yaml), as snakemake --configfile; after the targets")
    p.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE",
                   help="overrides, as snakemake --config; after the targets")
    p.add_argument("--all", action="store_true", help="every job the targets need, finished ones too "
                   "(snakemake --forceall): with results/benchmarks/, estimate beside actual")
    p.add_argument("--directory", type=Path, default=None, help="the workflow's folder (default: here)")
    p.add_argument("--force", action="store_true", help="show a plan whose jobs do not fit the configured "
                   "card (gpu) instead of refusing it")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from metrobench.footprint.disk import free_gb
    from metrobench.plan import DEFAULT_CONFIG, plan_of, plan_table, rate_sources

    planned = plan_of(args.targets, args.configfile or [DEFAULT_CONFIG], args.config, forceall=args.all,
                      cwd=args.directory, force=args.force)
    rows = planned.rows
    for warning in planned.warnings:   # before the table: they are what to fix before starting
        print(f"metrobench: warning: {warning}", file=sys.stderr, flush=True)
    print(plan_table(rows))
    gpu = planned.study.gpu
    print(f"GPU GiB: peak estimate of a row's jobs (metrobench/footprint/; ~: inferred widths); fits: "
          + (f"{gpu.name}, {gpu.memory_gib:g} GiB with {gpu.headroom_gib:g} GiB kept free" if gpu
             else "no card configured (gpu), not checked"))
    results = (args.directory or Path(".")) / planned.study.results
    free = free_gb(results)
    disk = planned.disk
    print(f"disk: the plan fetches and writes {disk.describe()}; {free:.0f} GB free under "
          f"{planned.study.results}" + ("" if free >= disk.needed else f": {disk.needed - free:.0f} GB short"))
    print("case runs: model runs only (a score row's are cases scored); prices: the config's throughput "
          "section (docs/paper-study.md, What a plan costs)" + ("; ?: no entry prices it" if _unknown(rows) else ""))
    for line in rate_sources(planned.study, rows):
        print(line)
    with contextlib.chdir(args.directory or Path(".")):     # the config's paths are the workflow's
        schedule = _schedule_lines(planned.study, rows)
    for line in schedule:
        print(line)
    return 0


def _schedule_lines(study: StudyConfig, rows: list[Row]) -> list[str]:
    """The makespan on one card beside the GPU-hours (:mod:`metrobench.footprint.schedule`)."""
    from metrobench.footprint.schedule import makespans

    spans = makespans(rows, study)
    if spans is None:
        return ["makespan: no card configured (gpu): not scheduled"]

    def hours(seconds: float | None) -> str:
        return "?" if seconds is None else f"{seconds / 3600:.2f} h"

    assert study.gpu is not None        # makespans schedules only on a configured card
    return [
        f"makespan on one {study.gpu.name} ({spans.jobs} GPU jobs; teachers' runs, then training, each student's runs "
        "after its training; CPU stages take no time here):",
        f"  one at a time (gpu=1, profiles/default): {hours(spans.alone_s)}",
        f"  packed by memory (profiles/packed: {spans.capacity_gib:g} GiB, at most {spans.max_jobs} at once; "
        f"{spans.most_at_once} at most here): {hours(spans.packed_s)} if side by side costs no speed, a bound "
        "(what servers side by side gain is unmeasured)",
    ]


def _unknown(rows: list[Row]) -> bool:
    return any(None in (row.gpu_s, row.api_in, row.api_out) for row in rows)
