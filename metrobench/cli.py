"""``metrobench <stage>``: one command per pipeline stage, the same entry points the rules call.

User mistakes (a missing file, a malformed case, a bad argument) end with one
``metrobench: error: ...`` line and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from metrobench.errors import MetrobenchError


def _add_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="ROOT", help="benchmark root (default: $METROBENCH_DATA)")


def _bench(args: argparse.Namespace):
    from metrobench.data import Benchmark

    return Benchmark.open(args.data)


def cmd_fetch_data(args: argparse.Namespace) -> int:
    from metrobench.data.root import fetch

    root = fetch(Path(args.dest), repository=args.repository, commit=args.commit,
                 verify=not args.no_verify)
    print(f"benchmark data at {root}")
    return 0


def cmd_verify_data(args: argparse.Namespace) -> int:
    from metrobench.data import SYSTEMS, verify_checksums

    bench = _bench(args)
    checked = verify_checksums(bench.root)
    total = 0
    for system in SYSTEMS:
        total += len(bench.cases(system))
    print(f"{len(checked)} files match the pinned release; {total} cases of {len(SYSTEMS)} systems validate")
    if args.stamp:
        Path(args.stamp).parent.mkdir(parents=True, exist_ok=True)
        Path(args.stamp).write_text(json.dumps({"root": str(bench.root), "files": checked}, indent=1) + "\n")
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    from metrobench.partition import committed_split, partition_benchmark, write_partition

    bench = _bench(args)
    document = partition_benchmark(bench, seed=args.seed, frac=args.frac)
    if (args.seed, args.frac) == (42, 0.25):
        committed = committed_split(bench)
        for key in ("train_ids", "holdout_ids"):
            if document[key] != committed[key]:
                raise MetrobenchError(f"partition: {key} differ from the committed split file")
    write_partition(document, Path(args.out))
    totals = document["totals"]
    print(f"wrote {args.out}: {totals['train']} train / {totals['holdout']} held-out")
    return 0


def cmd_tool(args: argparse.Namespace) -> int:
    from metrobench.replay import replay_file

    bench = _bench(args)
    path = Path(args.calls)
    if not path.is_file():
        raise MetrobenchError(f"{path}: no such file")
    out = sys.stdout
    for record in replay_file(bench, args.system, path):
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return 0


def cmd_serve_tools(args: argparse.Namespace) -> int:
    from metrobench.server import serve

    serve(_bench(args), args.system, args.port, host=args.host)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metrobench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="STAGE")

    p = sub.add_parser("fetch-data", help="clone the benchmark repository at the pinned commit")
    p.add_argument("--dest", required=True, help="folder to clone into")
    p.add_argument("--repository", help="repository URL or path (default: the public one)")
    p.add_argument("--commit", help="commit to check out (default: the pinned one)")
    p.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check")
    p.set_defaults(func=cmd_fetch_data)

    p = sub.add_parser("verify-data", help="check SHA-256 digests and validate every file and case")
    _add_data(p)
    p.add_argument("--stamp", help="write a JSON stamp here when everything checks out")
    p.set_defaults(func=cmd_verify_data)

    p = sub.add_parser("partition", help="the stratified train/held-out split")
    _add_data(p)
    p.add_argument("--out", required=True, help="output JSON file")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--frac", type=float, default=0.25, help="held-out fraction")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("tool", help="replay tool calls from a JSONL file, one JSON answer per line")
    _add_data(p)
    p.add_argument("--system", required=True)
    p.add_argument("calls", metavar="CALLS.jsonl")
    p.set_defaults(func=cmd_tool)

    p = sub.add_parser("serve-tools", help="serve the tools over HTTP on 127.0.0.1")
    _add_data(p)
    p.add_argument("--system", required=True)
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--host", default="127.0.0.1")
    p.set_defaults(func=cmd_serve_tools)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except MetrobenchError as exc:
        print(f"metrobench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
