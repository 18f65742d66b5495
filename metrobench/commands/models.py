"""Models by name: ``lock`` (resolve the config's downloads on the hub) and ``fetch-model`` (download them).

Contract: ``lock`` reads the study config's ``downloads`` section and writes
its lock file (``downloads.lock``, default ``config/models.lock.yaml``): entries
already locked and still asked for the same way are kept as they are (the
lock changes only when told), new entries are resolved, entries the config no
longer names are dropped; ``--update NAME`` re-resolves one entry,
``--adopt PATH`` records a file placed by hand. Nothing is downloaded.
``fetch-model`` downloads one locked entry and verifies it against the lock;
an entry not locked yet stops at once with one line naming ``metrobench lock``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from metrobench.commands.common import Subparsers, load_study
from metrobench.errors import MetrobenchError


def register(sub: Subparsers[argparse.ArgumentParser]) -> None:
    for add in (_add_lock, _add_fetch_model):
        add(sub)


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action="append", default=None, metavar="FILE",
                   help="study config (repeatable, merged in order; default: config/config.yaml)")


def _add_lock(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lock", help="resolve the config's model downloads on the hub into the lock file")
    _add_config(p)
    p.add_argument("--update", action="append", default=[], metavar="NAME",
                   help="re-resolve this entry (a GGUF path or a base repo; repeatable)")
    p.add_argument("--adopt", action="append", default=[], metavar="PATH",
                   help="record a file placed by hand as a local entry (hashed here; repeatable)")
    p.add_argument("--check", action="store_true",
                   help="resolve nothing: exit 1 with one line per entry that is unlocked or disagrees")
    p.set_defaults(func=cmd_lock)


def cmd_lock(args: argparse.Namespace) -> int:
    from metrobench.hub.lock import (adopt, gguf_key, gguf_path_problem, lock_problems, mismatched, read_lock,
                                     stale, unlocked, write_lock)
    from metrobench.hub.resolve import resolve_base, resolve_gguf

    downloads = load_study(args.config or ["config/config.yaml"]).downloads
    lock = read_lock(downloads.lock)
    args.update = [n if n in downloads.bases or gguf_path_problem(n) else gguf_key(n) for n in args.update]
    unknown = [n for n in args.update if n not in downloads.gguf and n not in downloads.bases]
    if unknown:
        raise MetrobenchError(f"--update {unknown[0]}: not an entry of the config's downloads "
                              f"(a GGUF path under downloads.gguf or a repo under downloads.bases)")
    if args.check:
        problems = lock_problems(downloads, lock, downloads.lock) + [
            f"{downloads.lock}: {name} is not locked yet: run `metrobench lock`" for name in unlocked(downloads, lock)]
        for line in problems:
            print(line)
        return 1 if problems else 0
    for path in args.adopt:
        key, entry = adopt(lock, path)
        print(f"{key}: adopted as a local file ({entry.size} bytes, SHA-256 {entry.sha256[:12]}...)")
    redo = set(args.update) | set(mismatched(downloads, lock))
    for path in [p for p in downloads.gguf if p not in lock.gguf or p in redo]:
        want = downloads.gguf[path]
        lock.gguf[path] = locked = resolve_gguf(path, want)
        print(f"{path}: {want.repo}/{want.file} at {want.revision} -> {locked.commit[:12]}, "
              f"{locked.size} bytes, SHA-256 {locked.sha256[:12]}...")
    for repo in [r for r in downloads.bases if r not in lock.bases or r in redo]:
        lock.bases[repo] = base = resolve_base(repo, downloads.bases[repo])
        print(f"{repo}: at {downloads.bases[repo].revision} -> {base.commit[:12]}, {len(base.files)} files, "
              f"{sum(f.size for f in base.files.values())} bytes")
    for name in stale(downloads, lock):
        lock.gguf.pop(name, None)
        lock.bases.pop(name, None)
        print(f"{name}: no longer in the config's downloads: dropped from the lock")
    write_lock(downloads.lock, lock)
    print(f"{downloads.lock}: {len(lock.gguf)} GGUF files, {len(lock.bases)} bases locked")
    return 0


def _add_fetch_model(sub: Subparsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fetch-model", help="download a locked GGUF or base and verify it against the lock")
    p.add_argument("--lock", default="config/models.lock.yaml", help="the lock file (default: %(default)s)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--gguf", metavar="PATH", help="the GGUF at this path (a downloads.gguf entry)")
    what.add_argument("--base", metavar="REPO", help="a student's base weights (a downloads.bases entry)")
    p.add_argument("--stamp", help="with --base: write what was verified here (JSON)")
    p.set_defaults(func=cmd_fetch_model)


def cmd_fetch_model(args: argparse.Namespace) -> int:
    from metrobench.hub.fetch import fetch_base, fetch_gguf, write_base_stamp
    from metrobench.hub.lock import read_lock

    lock = read_lock(args.lock)
    if args.gguf:
        path = fetch_gguf(lock, args.lock, args.gguf)
        entry = lock.gguf[str(path)]
        print(f"{path}: {entry.size} bytes, SHA-256 {entry.sha256[:12]}... as locked")
        return 0
    folder = fetch_base(lock, args.lock, args.base)
    entry = lock.bases[args.base]
    if args.stamp:
        write_base_stamp(Path(args.stamp), args.base, entry, folder)
    print(f"{args.base} at {entry.commit[:12]}: {len(entry.files)} files verified in {folder}")
    return 0
