"""Resolve the config's download entries against the hub's metadata: no file is downloaded.

One metadata call per entry (``model_info(..., files_metadata=True)``, the
hub's ``GET /api/models/<repo>/revision/<rev>?blobs=true``) gives the commit a
branch or tag points at and, for every file, its size, its Git blob id and,
for LFS files, its SHA-256. Every call has a total deadline
(:func:`with_deadline`): a hub that trickles its answer cannot hold the
command past it. Hub failures become one line naming the entry
(:func:`hub_error`).
"""

from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from metrobench.errors import MetrobenchError
from metrobench.hub.lock import FileDigest, LockedBase, LockedGguf, base_ignore

#: Seconds one metadata request may take in all (HF_HUB_ETAG_TIMEOUT bounds each read only).
METADATA_DEADLINE_S = 60.0
T = TypeVar("T")


def with_deadline(call: Callable[[], T], seconds: float, what: str) -> T:
    """``call()`` in a daemon thread, abandoned with one error line when it runs past ``seconds``."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise MetrobenchError(f"{what}: the hub did not answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def hub_error(exc: BaseException, what: str) -> MetrobenchError:
    """One line for a hub failure: unknown repo, gated repo, unknown revision or file, no network."""
    kind = type(exc).__name__
    messages = {
        "GatedRepoError": "the repository is gated: accept its terms on the hub and set HF_TOKEN",
        "RepositoryNotFoundError": "no such repository on the hub (or it is private: set HF_TOKEN)",
        "RevisionNotFoundError": "no such revision (branch, tag or commit) in the repository",
        "EntryNotFoundError": "no such file in the repository at that revision",
        "RemoteEntryNotFoundError": "no such file in the repository at that revision",
        "LocalEntryNotFoundError": "not in the local cache, and the hub cannot be reached",
        "OfflineModeIsEnabled": "HF_HUB_OFFLINE is set: the hub cannot be asked",
    }
    if kind in messages:
        offline = " (HF_HUB_OFFLINE is set)" if kind == "LocalEntryNotFoundError" and os.environ.get(
            "HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") else ""
        return MetrobenchError(f"{what}: {messages[kind]}{offline}")
    if isinstance(exc, MetrobenchError):
        return exc
    if kind in ("RemoteProtocolError", "ReadError", "IncompleteRead", "ChunkedEncodingError"):
        return MetrobenchError(f"{what}: the download was cut off ({str(exc)[:160]}); rerun to resume it")
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)) or "Connect" in kind or "Timeout" in kind:
        return MetrobenchError(f"{what}: cannot reach the hub ({kind}); no network? With a lock, only "
                               f"the downloads need it")
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else kind
    return MetrobenchError(f"{what}: the hub refused: {first}")


def quiet_hub() -> None:
    """huggingface_hub's own retry chatter off: a failure ends in one line of ours, not a dozen of its."""
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()


def _repo_files(repo: str, revision: str, what: str) -> tuple[str, dict[str, FileDigest]]:
    """The commit ``revision`` resolves to, and every file there with its size and digest."""
    from huggingface_hub import HfApi

    quiet_hub()
    try:
        info = with_deadline(lambda: HfApi().model_info(repo, revision=revision, files_metadata=True),
                             METADATA_DEADLINE_S, what)
    except Exception as exc:  # noqa: BLE001 - mapped to one line
        raise hub_error(exc, what) from None
    files = {}
    for sibling in info.siblings or []:
        lfs = sibling.lfs
        sha256 = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs else None
        files[sibling.rfilename] = FileDigest(size=sibling.size or 0, sha256=sha256,
                                              git_sha1=None if sha256 else sibling.blob_id)
    return info.sha, files


def resolve_gguf(path: str, want: Any) -> LockedGguf:
    """A GGUF entry resolved: the commit, the file's size and SHA-256 from the hub's metadata."""
    what = f"downloads.gguf[{path}] ({want.repo}/{want.file} at {want.revision})"
    commit, files = _repo_files(want.repo, want.revision, what)
    found = files.get(want.file)
    if found is None:
        raise MetrobenchError(f"{what}: no such file in the repository at that revision")
    if found.sha256 is None:
        raise MetrobenchError(f"{what}: not stored in Git LFS, so the hub lists no SHA-256 for it")
    return LockedGguf(repo=want.repo, file=want.file, revision=want.revision, commit=commit,
                      size=found.size, sha256=found.sha256)


def selected(names: list[str], allow: list[str] | None, ignore: list[str]) -> list[str]:
    """The file names ``snapshot_download`` fetches for these patterns (fnmatch, as it does)."""
    keep = [n for n in names if allow is None or any(fnmatch.fnmatch(n, p) for p in allow)]
    return sorted(n for n in keep if not any(fnmatch.fnmatch(n, p) for p in ignore))


def resolve_base(repo: str, want: Any) -> LockedBase:
    """A base entry resolved: the commit and every file the patterns select, with its digest."""
    what = f"downloads.bases[{repo}] (at {want.revision})"
    commit, files = _repo_files(repo, want.revision, what)
    ignore = base_ignore(want)
    names = selected(list(files), want.allow_patterns, ignore)
    if "config.json" not in names:
        raise MetrobenchError(f"{what}: no config.json among the files the patterns select")
    return LockedBase(revision=want.revision, commit=commit, allow_patterns=want.allow_patterns,
                      ignore_patterns=ignore, files={n: files[n] for n in names})
