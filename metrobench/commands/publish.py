"""``metrobench publish``: one trained student's folder as the paper published its students, and its upload.

Dry run by default: the folder (``results/publish/<size>/seed<N>/``, :func:`metrobench.layout.publish_dir`)
is written and its files listed with their sizes; ``--push --repo OWNER/NAME`` uploads it
(:mod:`metrobench.publish.push`). The workflow's ``publish`` rule runs the dry run only.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from metrobench.commands.common import Subparsers, load_study
from metrobench.errors import MetrobenchError

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("publish", help="a trained student's GGUF, adapter, training summary and model card "
                                       "(dry run: the folder; --push: to the hub)")
    p.add_argument("--config", action="append", help="study config file(s), merged in order")
    p.add_argument("--size", required=True, help="the student's size (a key of the config's students)")
    p.add_argument("--seed", required=True, type=int, help="the student's seed")
    p.add_argument("--out", help="the folder to write (default: results/publish/<size>/seed<N>)")
    p.add_argument("--lock", help="the models lock (default: the config's downloads.lock)")
    p.add_argument("--dry-run", dest="push", action="store_false", help="write the folder only (the default)")
    p.add_argument("--push", dest="push", action="store_true", help="upload the folder (token: $HF_TOKEN)")
    p.add_argument("--repo", help="OWNER/NAME on the hub; NAME also names the GGUF (<NAME>-Q4_K_M.gguf)")
    p.add_argument("--create", action="store_true", help="with --push: create the repo if it does not exist")
    p.add_argument("--update", action="store_true", help="with --push: replace the files of a repo that has some")
    p.set_defaults(func=cmd_publish, push=False)


def cmd_publish(args: argparse.Namespace) -> int:
    from metrobench import layout
    from metrobench.publish.bundle import assemble, gather

    if args.repo and not _REPO.match(args.repo):
        raise MetrobenchError(f"publish: --repo {args.repo!r} is not OWNER/NAME")
    if args.push and not args.repo:
        raise MetrobenchError("publish: --push needs --repo OWNER/NAME")
    study = load_study(args.config)
    facts = gather(study, args.size, args.seed, name=args.repo.split("/")[1] if args.repo else None,
                   lock=Path(args.lock) if args.lock else None)
    out = Path(args.out or layout.publish_dir(args.size, args.seed, study.results))
    files = assemble(facts, study, out)
    print(f"wrote {out}: {len(files)} files, {sum(files.values())} bytes")
    for name, size in files.items():
        print(f"{size:>14}  {name}")
    if not args.push:
        print("dry run: nothing uploaded (--push --repo OWNER/NAME uploads it)")
        return 0
    from metrobench.publish.push import push

    record = Path(f"{out}.push.json") if args.out else Path(layout.publish_record(args.size, args.seed, study.results))
    done = push(out, args.repo, files, create=args.create, update=args.update, record=record,
                message=f"{facts.name}: {facts.model} as metrobench published it")
    print(f"pushed {len(files)} files to {done['repo']} in commit {done['commit']}; recorded in {record}")
    return 0
