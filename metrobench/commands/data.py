"""The data stage: ``fetch-data``, ``verify-data`` and ``partition``.

Contract: ``fetch-data`` clones the benchmark at the pinned commit (digests
checked unless ``--no-verify``); ``verify-data`` checks every pinned digest and
validates every case, writing ``--stamp`` only when all pass; ``partition``
writes the stratified split and, at the paper's settings, refuses to write one
that differs from the committed split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from metrobench.commands.common import Subparsers, add_data, add_verify, open_bench, fraction, verified_bench
from metrobench.errors import MetrobenchError


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    for add in (_add_fetch_data, _add_verify_data, _add_partition):
        add(sub)


def _add_fetch_data(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fetch-data", help="clone the benchmark repository at the pinned commit")
    p.add_argument("--dest", required=True, help="folder to clone into")
    p.add_argument("--repository", help="repository URL or path (default: the public one)")
    p.add_argument("--commit", help="commit to check out (default: the pinned one)")
    p.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check")
    p.set_defaults(func=cmd_fetch_data)


def cmd_fetch_data(args: argparse.Namespace) -> int:
    from metrobench.data.root import fetch

    root = fetch(Path(args.dest), repository=args.repository, commit=args.commit,
                 verify=not args.no_verify)
    print(f"benchmark data at {root}")
    return 0


def _add_verify_data(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("verify-data", help="check SHA-256 digests and validate every file and case")
    add_data(p)
    p.add_argument("--stamp", help="write a JSON stamp here when everything checks out")
    p.set_defaults(func=cmd_verify_data)


def cmd_verify_data(args: argparse.Namespace) -> int:
    from metrobench.data import SYSTEMS, verify_checksums

    bench = open_bench(args.data)
    checked = verify_checksums(bench.root)
    total = 0
    for system in SYSTEMS:
        total += len(bench.cases(system))
    print(f"{len(checked)} files match the pinned release; {total} cases of {len(SYSTEMS)} systems validate")
    if args.stamp:
        from metrobench.atomic import write_text

        write_text(args.stamp, json.dumps({"root": str(bench.root), "files": checked}, indent=1) + "\n")
    return 0


def _add_partition(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("partition", help="the stratified train/held-out split")
    add_data(p)
    p.add_argument("--out", required=True, help="output JSON file")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--frac", type=fraction, default=0.25, help="held-out fraction")
    add_verify(p)
    p.set_defaults(func=cmd_partition)


def cmd_partition(args: argparse.Namespace) -> int:
    from metrobench.data.partition import PAPER_FRAC, PAPER_SEED, committed_split, partition_benchmark, write_partition

    bench = verified_bench(args.data, args.no_verify)
    document = partition_benchmark(bench, seed=args.seed, frac=args.frac)
    if (args.seed, args.frac) == (PAPER_SEED, PAPER_FRAC):
        committed = committed_split(bench)
        for key in ("train_ids", "holdout_ids"):
            if document[key] != committed[key]:
                raise MetrobenchError(f"partition: {key} differ from the committed split file")
    write_partition(document, Path(args.out))
    totals = document["totals"]
    print(f"wrote {args.out}: {totals['train']} train / {totals['holdout']} held-out")
    return 0
