"""Pinned model downloads from the Hugging Face Hub: base GGUFs and student base weights.

The study config's ``downloads`` section names what the workflow may fetch:

* ``downloads.gguf``: ``<local path>: {repo, file, revision, sha256}``, a GGUF
  a configured model serves (``serving.gguf``). It is fetched at the pinned
  revision into the standard Hugging Face cache, its SHA-256 is checked, and
  only then is it copied (atomically) to the local path;
* ``downloads.bases``: ``<hub id>: {revision, allow_patterns?, ignore_patterns?}``,
  a student's base weights, fetched with ``snapshot_download`` at the pinned
  revision into the standard cache, skipping the vision tower and MTP shards
  by default (:data:`BASE_IGNORE`); ``metrobench train`` then finds them there.

:func:`check_downloads` validates the section (every field present, revisions
40 hex digits, SHA-256 64): the workflow calls it when it parses the config,
so a wrong entry stops the plan with one ``metrobench: error:`` line instead
of a job failing hours in. A fetched file whose digest differs is an error
naming the path, both digests and the config entry, and is not kept.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path
from typing import Any

from metrobench.atomic import atomic_open
from metrobench.errors import MetrobenchError

GGUF_FIELDS = ("repo", "file", "revision", "sha256")
#: Files a text-only student does not need: Qwen3.5's vision tower and its MTP head.
BASE_IGNORE = ["*vision*", "*visual*", "*mtp*", "*.gguf", "*.pth", "*.bin", "*.pt"]
_REVISION = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_downloads(downloads: dict[str, Any] | None, where: str = "config") -> list[str]:
    """The problems of a ``downloads`` section, one message each (empty when it is usable)."""
    problems = []
    downloads = downloads or {}
    for path, entry in (downloads.get("gguf") or {}).items():
        key = f"{where}: downloads.gguf[{path}]"
        if not isinstance(entry, dict):
            problems.append(f"{key}: expected a mapping with {', '.join(GGUF_FIELDS)}")
            continue
        missing = [f for f in GGUF_FIELDS if not entry.get(f)]
        if missing:
            problems.append(f"{key}: field {missing[0]} missing (every GGUF needs {', '.join(GGUF_FIELDS)})")
        elif not _REVISION.fullmatch(str(entry["revision"])):
            problems.append(f"{key}: field revision: {entry['revision']!r} is not a 40-hex commit")
        elif not _SHA256.fullmatch(str(entry["sha256"]).lower()):
            problems.append(f"{key}: field sha256: {entry['sha256']!r} is not 64 hex digits")
    for repo, entry in (downloads.get("bases") or {}).items():
        key = f"{where}: downloads.bases[{repo}]"
        revision = entry.get("revision") if isinstance(entry, dict) else None
        if not revision:
            problems.append(f"{key}: field revision missing (a base is fetched at a pinned commit)")
        elif not _REVISION.fullmatch(str(revision)):
            problems.append(f"{key}: field revision: {revision!r} is not a 40-hex commit")
    return problems


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_gguf(repo: str, file: str, revision: str, sha256: str, dest: Path) -> Path:
    """The GGUF at ``dest``, fetched at ``revision`` and checked against ``sha256``."""
    from huggingface_hub import hf_hub_download

    dest = Path(dest)
    try:
        cached = Path(hf_hub_download(repo, file, revision=revision))
    except Exception as exc:  # noqa: BLE001 - network, auth, unknown repo/file/revision
        raise MetrobenchError(f"{dest}: cannot download {repo}/{file} at {revision}: {exc}") from None
    got = sha256_of(cached)
    if got != sha256.lower():
        cached.unlink(missing_ok=True)   # the blob in the cache: a rerun fetches it afresh
        raise MetrobenchError(f"{dest}: SHA-256 of {repo}/{file} at {revision[:12]} is {got}, the config "
                              f"pins {sha256.lower()} (downloads.gguf[{dest}]); the file was not kept")
    with atomic_open(dest, "wb") as out, open(cached, "rb") as blob:
        shutil.copyfileobj(blob, out)
    return dest


def fetch_base(repo: str, revision: str, *, allow_patterns: list[str] | None = None,
               ignore_patterns: list[str] | None = None, local_files_only: bool = False) -> Path:
    """The snapshot folder of a base model at ``revision`` in the standard Hugging Face cache."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo, revision=revision, allow_patterns=allow_patterns,
                                   ignore_patterns=BASE_IGNORE if ignore_patterns is None else ignore_patterns,
                                   local_files_only=local_files_only)
    except Exception as exc:  # noqa: BLE001 - network, auth, unknown repo or revision, not in the cache
        raise MetrobenchError(f"cannot fetch base model {repo} at {revision}: {exc}") from None
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise MetrobenchError(f"base model {repo} at {revision}: no config.json in {folder}")
    return folder
