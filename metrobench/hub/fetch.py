"""Download exactly what the lock says, verify it, and only then let anything use it.

* A GGUF (:func:`fetch_gguf`) is streamed from the hub at the locked commit
  into a part file beside its destination (``models/.X.gguf.<digest>.part``,
  named by the locked SHA-256, so a part of another version is never resumed
  into this one, and is deleted when this one starts), flushed
  as it arrives. A download that is killed, cut off or refused keeps its part:
  the next fetch asks only for the rest (``Range: bytes=<size of the part>-``,
  as ``huggingface_hub`` does within one call; its own partial files do not
  outlive the process, so the project streams the file itself). A hub that
  ignores the range (200) is read from byte 0 again; one that answers ``206``
  from another byte (a proxy: ``Content-Range: bytes 0-...``) restarts the file
  from byte 0, once. A body cut short, a read error or a read time-out is tried
  again within the call from the bytes on disk, up to :data:`DOWNLOAD_TRIES`
  tries, each announced in one line on stderr; then the one-line error. Once the part holds the
  locked size, its size and SHA-256 are checked against the lock and it is
  renamed into place; a part that does not match is deleted, never left where a
  later job would trust it.
* One fetch of a GGUF at a time: the fetch holds an OS lock (``flock``) on a
  sidecar ``models/.X.gguf.lock`` while it works; a second fetch of the same
  file says so and waits, then finds the file there, verifies it and is done.
  The kernel drops the lock however the holder ends; the empty sidecar stays.
  A file at the destination that is not the locked one is never replaced: the
  user placed it, so the fetch stops and says how to adopt it or move it away.
* A base (:func:`fetch_base`) is downloaded at the locked commit into the
  standard Hugging Face cache (where ``metrobench train`` finds it offline),
  every selected file checked; a file that does not match is removed from the
  cache, blob included, so that the next run downloads it afresh instead of
  failing on the same bytes for ever.

Every failure is one line naming the entry and what happened
(:func:`~metrobench.hub.resolve.hub_error`): a full disk, a refused token
(401), no access (403), a server error (5xx), a body cut short, no network.
No token is ever part of a message. An entry the lock does not hold stops at
once with one line naming ``metrobench lock``: this is what the workflow's
fetch jobs do on a config that was never locked, seconds after they start.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from metrobench.atomic import lock_path, sidecar_lock, write_text
from metrobench.errors import MetrobenchError
from metrobench.hub.lock import LockedBase, LockedGguf, LockFile, file_problem, gguf_key
from metrobench.hub.resolve import disk_problem, hub_error, quiet_hub, status_problem
from metrobench.retry import backoff_delay

LOCK_HINT = ("run `metrobench lock` (resolves the config's downloads on the hub; no download) and commit "
             "the lock, or place the file there and run `metrobench lock --adopt {path}`")


def part_path(dest: Path, entry: LockedGguf) -> Path:
    """Where a GGUF's download accumulates until it is whole and verified: named by the locked digest,
    so a part of another version of the file (the lock updated since) is never resumed into this one."""
    return dest.with_name(f".{dest.name}.{entry.sha256[:12]}.part")


def _drop_other_parts(dest: Path, keep: Path) -> None:
    """Parts of other versions of ``dest`` (fetches under an older lock entry): this fetch's kind wrote them."""
    for other in dest.parent.glob(f".{dest.name}.*.part"):
        if other != keep and len(other.name) == len(keep.name):
            other.unlink(missing_ok=True)


def locked_gguf(lock: LockFile, lock_path: str, path: str) -> LockedGguf:
    entry = lock.gguf.get(path)
    if entry is None:
        raise MetrobenchError(f"{path}: not in {lock_path} yet: " + LOCK_HINT.format(path=path))
    return entry


def fetch_lock(dest: Path) -> AbstractContextManager[None]:
    """Hold ``dest``'s fetch lock; when another process holds it, say so once and wait for it."""
    def waiting() -> None:
        print(f"{dest}: another fetch of this file is running; waiting for it to finish", file=sys.stderr,
              flush=True)

    return sidecar_lock(dest, waiting)


def fetch_gguf(lock: LockFile, lock_path: str, path: str) -> Path:
    """The GGUF at ``path``, downloaded (or resumed) at its locked commit and verified, or verified in place."""
    key = gguf_key(path)
    entry = locked_gguf(lock, lock_path, key)
    dest = Path(key)
    if entry.source == "local":
        if not dest.is_file():
            raise MetrobenchError(f"{key}: adopted in {lock_path} as a local file, and missing: put it back, or "
                                  f"name it in the config's downloads and run `metrobench lock --update {key}`")
        return _verified(dest, entry, lock_path)
    what = f"{key} ({entry.repo}/{entry.file} at {entry.commit})"
    with fetch_lock(dest):
        if dest.is_file():        # fetched meanwhile by another process, or earlier
            problem = file_problem(dest, entry)
            if problem is None:
                return dest
            raise MetrobenchError(f"{key}: a file is already there, and it is not the locked one ({problem}); "
                                  f"it is not replaced: move it away and rerun, or keep it with "
                                  f"`metrobench lock --adopt {key}`")
        part = part_path(dest, entry)
        _drop_other_parts(dest, part)
        _download(entry, part, what)
        problem = file_problem(part, entry)
        if problem:
            part.unlink(missing_ok=True)
            raise MetrobenchError(f"{what}: the download has {problem}; it was deleted (rerun to download "
                                  f"again, or re-resolve the entry: `metrobench lock --update {key}`)")
        os.replace(part, dest)
    return dest


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


#: Tries of one GGUF download within one call: a body cut short, a read error or a read time-out is
#: tried again from the bytes on disk (``Range``), as ``huggingface_hub`` does within its own calls,
#: so that one network reset does not fail the fetch job; after the last, the one-line error.
DOWNLOAD_TRIES = 4
#: The first pause between tries, doubled each time (with jitter): 0.5, 1, 2 s.
RETRY_BASE_S = 0.5


class _Cut(Exception):
    """A transient end of one try (the body cut short, a read error, a read time-out): resumable."""

    def __init__(self, reason: str, got: int) -> None:
        super().__init__(reason)
        self.reason, self.got = reason, got


class _RangeIgnored(Exception):
    """A ``206`` whose ``Content-Range`` does not start at the byte asked for (a proxy ignoring the start)."""

    def __init__(self, have: int, content_range: str | None) -> None:
        super().__init__(content_range)
        self.have, self.content_range = have, content_range


def _download(entry: LockedGguf, part: Path, what: str) -> None:
    """Bring ``part`` to the locked file's full size from the hub, asking only for the bytes it lacks.

    Why tries within the call: a download cut once used to stop its fetch job ("rerun to resume"),
    so one network reset failed the workflow (issue 51); each try resumes from the bytes on disk, at
    most :data:`DOWNLOAD_TRIES`. Why a restart from byte 0: a ``206`` that does not start at the byte
    asked for (a proxy answering ``bytes 0-...`` to every range) cannot be appended, and resuming it
    again fails the same way on every rerun; the part is emptied and the file asked for whole, once."""
    from huggingface_hub import constants

    quiet_hub()
    if _size(part) > entry.size:          # longer than the file: no prefix of it
        part.unlink()
    if _size(part) == entry.size:
        return
    if constants.HF_HUB_OFFLINE:
        raise MetrobenchError(f"{what}: HF_HUB_OFFLINE is set: the hub cannot be asked")
    tries, restarted = 0, False
    while True:
        tries += 1
        try:
            _try_download(entry, part, what)
            return
        except _RangeIgnored as exc:
            shown = repr(exc.content_range) if exc.content_range else "no Content-Range"
            if restarted:
                raise MetrobenchError(f"{what}: asked for the bytes from {exc.have} on, the hub answered {shown} "
                                      f"again after a restart from byte 0 (a proxy that ignores Range?); the part "
                                      f"is kept in {part}") from None
            restarted, tries = True, tries - 1      # the restart is not a failed try
            with _open_part(part, what) as handle:
                handle.truncate(0)
            print(f"{what}: asked for the bytes from {exc.have} on, the hub answered {shown}: restarting the "
                  f"file from byte 0", file=sys.stderr, flush=True)
        except _Cut as cut:
            have = _size(part)
            if tries >= DOWNLOAD_TRIES:
                raise MetrobenchError(f"{what}: {cut.reason} after {have} of {entry.size} bytes ({tries} tries in "
                                      f"this call); the part is kept in {part}: rerun to resume") from None
            print(f"{what}: {cut.reason} after {have} of {entry.size} bytes; resuming from byte {have} "
                  f"(try {tries + 1} of {DOWNLOAD_TRIES})", file=sys.stderr, flush=True)
            time.sleep(backoff_delay(tries, RETRY_BASE_S))


def _try_download(entry: LockedGguf, part: Path, what: str) -> None:
    """One request for the bytes ``part`` lacks, appended as they arrive; :class:`_Cut` when the answer
    ends early, :class:`_RangeIgnored` when a ``206`` starts elsewhere, else a one-line error."""
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    have = _size(part)
    headers = build_hf_headers()
    if have:
        headers["Range"] = f"bytes={have}-"
    url = hf_hub_url(entry.repo, entry.file, revision=entry.commit)
    got = have
    try:
        with _open_part(part, what) as handle, get_session().stream(
                "GET", url, headers=headers, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT,
                follow_redirects=True) as response:
            status = response.status_code
            if status == 416:      # the hub says the part already reaches past the file: start again
                part.unlink()
                raise MetrobenchError(f"{what}: the hub refused to resume at byte {have} (416); the part was "
                                      f"deleted: rerun to download from the start")
            if status >= 400:      # the library's reading of the hub's error codes, then ours of it
                response.read()
                hf_raise_for_status(response)
                raise MetrobenchError(f"{what}: {status_problem(status)}")
            content_range = response.headers.get("Content-Range")
            if have and status == 206 and not (content_range or "").startswith(f"bytes {have}-"):
                raise _RangeIgnored(have, content_range)
            if have and status != 206:   # the whole file (a hub that ignores the range): from byte 0
                handle.truncate(0)
                have = got = 0
            for chunk in response.iter_bytes():   # as each read arrives: none held back in a buffer
                _write(handle, chunk, part, what)
                got += len(chunk)
    except (MetrobenchError, _RangeIgnored):
        raise
    except Exception as exc:  # noqa: BLE001 - one line naming the entry
        # by name: the hub library's HTTP client is httpx in huggingface_hub 1.x, httpx2 in 2.x
        kind = type(exc).__name__
        if kind in ("RemoteProtocolError", "ReadError"):
            raise _Cut(f"the hub's answer was cut short ({kind})", got) from None
        if kind == "ReadTimeout":
            raise _Cut(f"the hub sent nothing for {constants.HF_HUB_DOWNLOAD_TIMEOUT} s", got) from None
        raise hub_error(exc, what) from None
    if got < entry.size:
        raise _Cut("the hub's answer was cut short", got)


@contextmanager
def _open_part(part: Path, what: str) -> Iterator[Any]:
    """The part file for appending, unbuffered (a killed fetch keeps every byte it wrote); opened before
    the request is sent, so it is there however soon the fetch is killed."""
    try:
        handle = open(part, "ab", buffering=0)  # noqa: SIM115 - closed below
    except OSError as exc:
        raise MetrobenchError(f"{what}: cannot write {part}: {disk_problem(exc)}") from None
    try:
        yield handle
    finally:
        handle.close()


def _write(handle: Any, chunk: bytes, part: Path, what: str) -> None:
    view = memoryview(chunk)
    try:
        while view:
            view = view[handle.write(view):]
    except OSError as exc:
        kept = "; the part is kept: free space and rerun to resume" if exc.errno in (errno.ENOSPC, errno.EDQUOT) \
            else ""
        raise MetrobenchError(f"{what}: cannot write {part}: {disk_problem(exc)}{kept}") from None


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
