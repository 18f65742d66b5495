"""Resolve the config's download entries against the hub's metadata: no file is downloaded.

One metadata call per entry (``model_info(..., files_metadata=True)``, the
hub's ``GET /api/models/<repo>/revision/<rev>?blobs=true``) gives the commit a
branch or tag points at and, for every file, its size, its Git blob id and,
for LFS files, its SHA-256. Every call has a total deadline
(:func:`with_deadline`): a hub that trickles its answer cannot hold the
command past it. Hub failures become one line naming the entry and what
happened (:func:`hub_error`, shared with the downloads): an unknown repo,
revision or file, a gated repo, a refused token (401), no access (403), a
server error (5xx), a body cut short, a full disk, no network — each said as
itself, never as "no network", and never with the token in it.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from metrobench.errors import MetrobenchError
from metrobench.hub.lock import FileDigest, LockedBase, LockedGguf, base_ignore

#: Seconds one metadata request may take in all (HF_HUB_ETAG_TIMEOUT bounds each read only).
METADATA_DEADLINE_S = 60.0
#: What a Hugging Face access token looks like (never shown in a message).
_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8,}")
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


def status_problem(status: int) -> str:
    """What an HTTP status from the hub means for the user, in words (never the server's text: no token)."""
    if status == 401:
        return "the hub refused the token (401): HF_TOKEN is missing, expired or wrong for this repository"
    if status == 403:
        return ("the hub refused access (403): the token may not read this repository (a gated one: accept its "
                "terms on the hub; a fine-grained token: give it read access)")
    if status == 404:
        return "not found on the hub (404)"
    if status == 429:
        return "the hub is rate-limiting this client (429): wait a while and rerun"
    if status >= 500:
        return f"the hub failed with a server error ({status}): rerun later"
    return f"the hub answered HTTP {status}"


def disk_problem(exc: OSError) -> str:
    """A local file error in words: a full disk or quota said plainly, else the system's own words."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the disk (ENOSPC)" if exc.errno == errno.ENOSPC else "disk quota exceeded (EDQUOT)"
    return exc.strerror or type(exc).__name__


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status a hub library error carries, here or in the errors it was raised from."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int) and status >= 400:
            return status
        current = current.__cause__ or current.__context__
    return None


def hub_error(exc: BaseException, what: str) -> MetrobenchError:
    """One line for a hub failure, by what happened: unknown repo, gated repo, unknown revision or file,
    a refused token (401), no access (403), a server error (5xx), a body cut short, a full disk, no network.

    The hub library's own text is repeated only where nothing else says what happened, any token in it
    blanked (:func:`scrub_hub_token`).
    """
    kind = type(exc).__name__
    messages = {
        "GatedRepoError": "the repository is gated: accept its terms on the hub and set HF_TOKEN",
        "RepositoryNotFoundError": "no such repository on the hub (or it is private: set HF_TOKEN)",
        "RevisionNotFoundError": "no such revision (branch, tag or commit) in the repository",
        "EntryNotFoundError": "no such file in the repository at that revision",
        "RemoteEntryNotFoundError": "no such file in the repository at that revision",
        "OfflineModeIsEnabled": "HF_HUB_OFFLINE is set: the hub cannot be asked",
    }
    if isinstance(exc, MetrobenchError):
        return exc
    if kind in messages:
        return MetrobenchError(f"{what}: {messages[kind]}")
    status = _status_of(exc)
    if status is not None and status != 404:
        return MetrobenchError(f"{what}: {status_problem(status)}")
    if kind == "LocalEntryNotFoundError":
        offline = " (HF_HUB_OFFLINE is set)" if os.environ.get(
            "HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") else ""
        return MetrobenchError(f"{what}: not in the local cache, and the hub cannot be reached{offline}")
    if kind in ("RemoteProtocolError", "ReadError", "IncompleteRead", "ChunkedEncodingError") or (
            "Consistency check failed" in str(exc)):
        return MetrobenchError(f"{what}: the hub's answer was cut short ({kind}); rerun to download it again")
    if isinstance(exc, (ConnectionError, TimeoutError)) or "Connect" in kind or "Timeout" in kind:
        return MetrobenchError(f"{what}: cannot reach the hub ({kind}); no network? With a lock, only "
                               f"the downloads need it")
    if isinstance(exc, OSError) and exc.errno is not None:   # the local side: a full disk, a read-only folder
        where = f" {exc.filename}" if exc.filename else ""
        return MetrobenchError(f"{what}: cannot write{where}: {disk_problem(exc)}")
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else kind
    return MetrobenchError(f"{what}: the hub library failed: {scrub_hub_token(first)}")


def scrub_hub_token(text: str) -> str:
    """``text`` with anything that looks like a hub token, and the token in use, blanked."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        text = text.replace(token, "***")
    return _TOKEN.sub("***", text)


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
