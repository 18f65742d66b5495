"""Download exactly what the lock says, verify it, and only then let anything use it.

* A GGUF (:func:`fetch_gguf`) is downloaded at the locked commit into a
  download folder beside its destination (``models/.X.gguf.download/``, so a
  killed download resumes and nothing is copied twice), its size and SHA-256
  are checked against the lock, and it is renamed into place. A file that does
  not match is deleted, never left where a later job would trust it.
* A base (:func:`fetch_base`) is downloaded at the locked commit into the
  standard Hugging Face cache (where ``metrobench train`` finds it offline),
  every selected file checked; a file that does not match is removed from the
  cache, blob included, so that the next run downloads it afresh instead of
  failing on the same bytes for ever.

An entry the lock does not hold stops at once with one line naming
``metrobench lock``: this is what the workflow's fetch jobs do on a config
that was never locked, seconds after they start.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from metrobench.atomic import write_text
from metrobench.errors import MetrobenchError
from metrobench.hub.lock import LockedBase, LockFile, file_problem
from metrobench.hub.resolve import hub_error, quiet_hub

LOCK_HINT = ("run `metrobench lock` (resolves the config's downloads on the hub; no download) and commit "
             "the lock, or place the file there and run `metrobench lock --adopt {path}`")


def locked_gguf(lock: LockFile, lock_path: str, path: str):
    entry = lock.gguf.get(path)
    if entry is None:
        raise MetrobenchError(f"{path}: not in {lock_path} yet: " + LOCK_HINT.format(path=path))
    return entry


def fetch_gguf(lock: LockFile, lock_path: str, path: str) -> Path:
    """The GGUF at ``path``, downloaded at its locked commit and verified (or verified in place)."""
    from huggingface_hub import hf_hub_download

    quiet_hub()
    entry = locked_gguf(lock, lock_path, path)
    dest = Path(path)
    if entry.source == "local":
        if not dest.is_file():
            raise MetrobenchError(f"{path}: adopted in {lock_path} as a local file, and missing: put it back, or "
                                  f"name it in the config's downloads and run `metrobench lock --update {path}`")
        return _verified(dest, entry, lock_path)
    what = f"{path} ({entry.repo}/{entry.file} at {entry.commit})"
    staging = dest.with_name(f".{dest.name}.download")
    try:
        got = Path(hf_hub_download(entry.repo, entry.file, revision=entry.commit, local_dir=staging))
    except Exception as exc:  # noqa: BLE001 - one line naming the entry
        raise hub_error(exc, what) from None
    problem = file_problem(got, entry)
    if problem:
        shutil.rmtree(staging, ignore_errors=True)
        raise MetrobenchError(f"{what}: the download has {problem}; it was deleted (rerun to download again, "
                              f"or re-resolve the entry: `metrobench lock --update {path}`)")
    os.replace(got, dest)
    shutil.rmtree(staging, ignore_errors=True)
    return dest


def _verified(dest: Path, entry: Any, lock_path: str) -> Path:
    problem = file_problem(dest, entry)
    if problem:
        raise MetrobenchError(f"{dest}: the file has {problem} ({lock_path}); replace it, or adopt it anew "
                              f"with `metrobench lock --adopt {dest}`")
    return dest


def _forget(file: Path) -> None:
    """Remove a cached file and, when it is a link into the cache's blobs, the blob behind it."""
    blob = file.resolve() if file.is_symlink() else None
    file.unlink(missing_ok=True)
    if blob is not None:
        blob.unlink(missing_ok=True)


def fetch_base(lock: LockFile, lock_path: str, repo: str, *, local_files_only: bool = False) -> Path:
    """The snapshot folder of a base at its locked commit in the standard cache, every file verified."""
    from huggingface_hub import snapshot_download

    quiet_hub()
    entry: LockedBase | None = lock.bases.get(repo)
    if entry is None:
        raise MetrobenchError(f"{repo}: not in {lock_path} yet: run `metrobench lock` (resolves the config's "
                              f"downloads on the hub; no download) and commit the lock")
    what = f"base {repo} at {entry.commit}"
    try:
        folder = Path(snapshot_download(repo, revision=entry.commit, allow_patterns=sorted(entry.files),
                                        local_files_only=local_files_only))
    except Exception as exc:  # noqa: BLE001 - one line naming the entry
        raise hub_error(exc, what) from None
    for name, digest in sorted(entry.files.items()):
        file = folder / name
        problem = "is missing" if not file.is_file() else file_problem(file, digest)
        if problem:
            _forget(file)
            raise MetrobenchError(f"{what}: {name} {'' if problem == 'is missing' else 'has '}{problem}; it was "
                                  f"removed from the cache (rerun to download it again)")
    return folder


def write_base_stamp(stamp: Path | str, repo: str, entry: LockedBase, folder: Path) -> None:
    """What the fetch job verified, for the train rule's input and for people."""
    write_text(stamp, json.dumps({"repo": repo, "revision": entry.revision, "commit": entry.commit,
                                  "folder": str(folder), "files": sorted(entry.files)}, indent=2) + "\n")
