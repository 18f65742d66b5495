"""The models lock: what the config asks of the hub, and what it resolved to.

The study config's ``downloads`` section states intent, the way a
``pyproject.toml`` does (:class:`~metrobench.study.Downloads`): a served GGUF
by hub repo and file, a student base by hub repo, each at a branch, tag or
commit. ``metrobench lock`` resolves every entry once against the hub's
metadata (no download) and writes ``config/models.lock.yaml``: the commit, and
for every file its size and digest (SHA-256 for Git-LFS files, the Git blob id
for small ones). The lock is committed, read by people and checked by the
workflow at plan time:

* an entry whose intent differs from its lock entry (another repo, file,
  revision or pattern) stops the plan: ``metrobench lock --update NAME``;
* an entry not locked yet plans its fetch job, which stops at once, naming
  ``metrobench lock``;
* a file placed by hand can be adopted (``metrobench lock --adopt PATH``:
  hashed here, recorded as ``source: local``), which satisfies any intent for
  that path.

A GGUF entry is keyed by its path relative to the project folder, normalised in
one place (:func:`gguf_key`: ``./models/x.gguf`` and ``models//x.gguf`` are
``models/x.gguf``), in the config, the lock, ``--adopt``, ``--update`` and
``fetch-model`` alike, so one file is one entry and an adopted file is never
taken for an unlocked download and overwritten. A key that is not a file path
(empty, ``.``, a folder ``m/``, absolute, climbing out with ``..``) is refused.

With a lock present nothing needs the hub but the downloads themselves
(:mod:`metrobench.hub.fetch`), which fetch exactly the locked commit and check
every file's size and digest before anything uses it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from metrobench.atomic import write_text
from metrobench.data.root import sha256_file
from metrobench.errors import MetrobenchError

DEFAULT_LOCK = "config/models.lock.yaml"
LOCK_HEADER = ("# Written by `metrobench lock` from the config's `downloads` section: commit it.\n"
               "# What each entry resolved to on the hub (commit, and per file its size and digest).\n"
               "# Re-resolve one entry with `metrobench lock --update NAME`; never edit by hand.\n")
#: Files a text-only student does not need: Qwen3.5's vision tower and MTP head, other weight formats.
BASE_IGNORE = ["*vision*", "*visual*", "*mtp*", "*.gguf", "*.pth", "*.bin", "*.pt"]

Commit = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


def gguf_path_problem(path: str) -> str | None:
    """Why ``path`` cannot key a GGUF entry (a file path relative to the project folder), or None."""
    if not path.strip():
        return "is empty, not a file path"
    if any(ord(char) < 32 for char in path):
        return "holds a control character (a newline?), not a file path"
    if path.startswith("/"):
        return "is absolute: name the file relative to the project folder (e.g. models/x.gguf)"
    if ".." in PurePosixPath(path).parts:
        return "climbs out of the project folder with '..': name the file inside it (e.g. models/x.gguf)"
    if path.endswith("/") or str(PurePosixPath(path)) == ".":
        return "names a folder, not a file (e.g. models/x.gguf)"
    return None


def gguf_key(path: str) -> str:
    """A GGUF entry's key: ``path`` normalised (no ``.`` parts, no doubled ``/``); a non-path refused."""
    problem = gguf_path_problem(path)
    if problem:
        raise MetrobenchError(f"GGUF path {path!r} {problem}")
    return str(PurePosixPath(path))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileDigest(_Strict):
    """A file as the hub lists it: its size and one digest (SHA-256 if LFS, else the Git blob id)."""

    size: int = Field(ge=0)
    sha256: Sha256 | None = None
    git_sha1: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")] | None = None


class LockedGguf(_Strict):
    """One served GGUF: fetched from the hub at ``commit``, or adopted from disk (``source: local``)."""

    source: Literal["hub", "local"] = "hub"
    repo: str | None = None
    file: str | None = None
    revision: str | None = Field(None, description="what the config asked: a branch, tag or commit")
    commit: Commit | None = None
    size: int = Field(ge=0)
    sha256: Sha256


class LockedBase(_Strict):
    """A student's base weights at ``commit``: every file the patterns select, with its digest."""

    revision: str
    commit: Commit
    allow_patterns: list[str] | None = None
    ignore_patterns: list[str]
    files: dict[str, FileDigest]


class LockFile(_Strict):
    version: Literal[1] = 1
    gguf: dict[str, LockedGguf] = {}
    bases: dict[str, LockedBase] = {}


def read_lock(path: Path | str) -> LockFile:
    """The lock at ``path`` (an empty one when absent); one error line naming the entry when malformed."""
    path = Path(path)
    if not path.is_file():
        return LockFile()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise MetrobenchError(f"{path}: not a readable lock file ({type(exc).__name__}); "
                              f"delete it and run `metrobench lock`") from None
    try:
        lock = LockFile.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        raise MetrobenchError(f"{path}: entry {where}: {error['msg']} (edited by hand? "
                              f"re-resolve it with `metrobench lock --update NAME`)") from None
    return _normalised(lock, path)


def _normalised(lock: LockFile, path: Path) -> LockFile:
    """The lock with its GGUF keys normalised (a lock written before they were): where two keys name one
    file, the adopted entry wins, since the user placed that file and the hub's must not replace it."""
    gguf: dict[str, LockedGguf] = {}
    for name, entry in lock.gguf.items():
        problem = gguf_path_problem(name)
        if problem:
            raise MetrobenchError(f"{path}: entry gguf.{name}: GGUF path {name!r} {problem} (edited by hand? "
                                  f"run `metrobench lock`)")
        key = gguf_key(name)
        if key not in gguf or entry.source == "local":
            gguf[key] = entry
    lock.gguf = gguf
    return lock


def write_lock(path: Path | str, lock: LockFile) -> Path:
    """The lock as sorted, human-readable YAML, written atomically."""
    data = lock.model_dump(mode="json", exclude_none=True)
    data["gguf"] = dict(sorted(data["gguf"].items()))
    data["bases"] = dict(sorted(data["bases"].items()))
    return write_text(path, LOCK_HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))


def base_ignore(want: Any) -> list[str]:
    """The ignore patterns a base entry applies: its own, else :data:`BASE_IGNORE`."""
    return list(BASE_IGNORE if want.ignore_patterns is None else want.ignore_patterns)


def gguf_matches(want: Any, locked: LockedGguf) -> bool:
    """Whether a lock entry satisfies the config's intent (an adopted file satisfies any)."""
    if locked.source == "local":
        return True
    return (locked.repo, locked.file, locked.revision) == (want.repo, want.file, want.revision)


def base_matches(want: Any, locked: LockedBase) -> bool:
    return (locked.revision == want.revision and locked.allow_patterns == want.allow_patterns
            and locked.ignore_patterns == base_ignore(want))


def mismatched(downloads: Any, lock: LockFile) -> list[str]:
    """The entries (GGUF paths, base repos) whose lock entry no longer says what the config asks."""
    return [p for p, want in downloads.gguf.items() if p in lock.gguf and not gguf_matches(want, lock.gguf[p])] + \
        [r for r, want in downloads.bases.items() if r in lock.bases and not base_matches(want, lock.bases[r])]


def lock_problems(downloads: Any, lock: LockFile, lock_path: str) -> list[str]:
    """One line per entry whose lock disagrees with the config (unlocked entries are not problems)."""
    problems = []
    for name in mismatched(downloads, lock):
        if name in downloads.gguf:
            want, locked = downloads.gguf[name], lock.gguf[name]
            differs = (f"the config asks for {want.repo}/{want.file} at {want.revision}, the lock holds "
                       f"{locked.repo}/{locked.file} at {locked.revision}")
            section = "gguf"
        else:
            differs, section = "the config's revision or patterns differ from the lock's", "bases"
        problems.append(f"{lock_path}: downloads.{section}[{name}]: {differs}; run `metrobench lock --update {name}`")
    return problems


def unlocked(downloads: Any, lock: LockFile) -> list[str]:
    """The config's download entries (GGUF paths, base repos) that the lock does not hold yet."""
    return [p for p in downloads.gguf if p not in lock.gguf] + [r for r in downloads.bases if r not in lock.bases]


def git_sha1_of(path: Path | str) -> str:
    """The Git blob id of a file (what the hub lists for files not stored in LFS)."""
    path = Path(path)
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_problem(path: Path, expected: FileDigest | LockedGguf) -> str | None:
    """Why ``path`` is not the locked file (size first, then digest), or None when it is."""
    size = path.stat().st_size
    if size != expected.size:
        return f"size {size} bytes, the lock says {expected.size}"
    if expected.sha256 is not None:
        got = sha256_file(Path(path))
        return None if got == expected.sha256 else f"SHA-256 {got}, the lock says {expected.sha256}"
    git_sha1 = getattr(expected, "git_sha1", None)
    if git_sha1 is not None:
        got = git_sha1_of(path)
        return None if got == git_sha1 else f"Git blob id {got}, the lock says {git_sha1}"
    return None


def adopt(lock: LockFile, path: Path | str) -> tuple[str, LockedGguf]:
    """Record a file placed by hand as a local lock entry (its size and SHA-256), under its normalised key.

    An absolute path inside the current folder is taken relative to it; any other is refused."""
    name = str(path)
    if Path(name).is_absolute():
        try:
            name = str(Path(name).relative_to(Path.cwd()))
        except ValueError:
            pass                          # outside the project folder: gguf_key refuses it
    key = gguf_key(name)
    file = Path(key)
    if not file.is_file():
        raise MetrobenchError(f"{path}: no such file to adopt")
    entry = LockedGguf(source="local", size=file.stat().st_size, sha256=sha256_file(file))
    lock.gguf[key] = entry
    return key, entry


def stale(downloads: Any, lock: LockFile) -> list[str]:
    """Lock entries the config no longer asks for (adopted files are kept: the user placed them)."""
    return [p for p, e in lock.gguf.items() if p not in downloads.gguf and e.source == "hub"] + \
        [r for r in lock.bases if r not in downloads.bases]
