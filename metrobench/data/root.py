"""Locating, verifying and fetching the benchmark root.

The benchmark root is a folder laid out like the public MetroLLM-Bench repository
(``cases/``, ``data/systems/``, ``data/splits/``). metrobench never copies it: it
reads it from a configured path, from ``METROBENCH_DATA``, or from a clone that
:func:`fetch` makes at the pinned commit. Every file whose content decides a
score is pinned by SHA-256, so a modified or truncated copy is caught before a
single case runs. The stages that read ground truth (``rule-agent``,
``partition``, ``score``) check the digests through :func:`verify_once`: the
whole release is about 7 MB, hashed once per process and root.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from metrobench.errors import DataError, MetrobenchError

#: System order used by the reference split script (and therefore by the partition).
SYSTEMS: tuple[str, ...] = ("marta", "doha", "bart", "taipei", "cta", "beijing")

#: Case-id prefix of each system (``<PREFIX>-<CATEGORY>-<NNN>``).
CASE_PREFIX: dict[str, str] = {
    "marta": "MARTA",
    "doha": "DOHA",
    "bart": "BART",
    "taipei": "TRTC",
    "cta": "CTA",
    "beijing": "BJM",
}
SYSTEM_BY_PREFIX: dict[str, str] = {prefix: system for system, prefix in CASE_PREFIX.items()}

SPLIT_FILE = "data/splits/v23_holdout75_seed42.json"
ENV_VAR = "METROBENCH_DATA"


@dataclass(frozen=True)
class PinnedRelease:
    """The public repository, the commit we reproduce, and its file digests."""

    repository: str
    commit: str
    sha256: dict[str, str]


@cache
def pinned_release() -> PinnedRelease:
    """Load the pinned commit and digests shipped with the package."""
    text = resources.files("metrobench.resources").joinpath("checksums.json").read_text()
    raw = json.loads(text)
    return PinnedRelease(raw["repository"], raw["commit"], dict(raw["sha256"]))


def resolve_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Return the benchmark root from an explicit path or ``METROBENCH_DATA``.

    Raises a :class:`MetrobenchError` naming both sources when neither is set,
    and naming the missing sub-folder when the path is not a benchmark root.
    """
    source = "--data"
    if explicit is None:
        env = os.environ.get(ENV_VAR)
        if not env:
            raise MetrobenchError(
                f"no benchmark root given: pass --data ROOT or set {ENV_VAR} "
                "(run `metrobench fetch-data --dest DIR` to clone the pinned release)"
            )
        explicit, source = env, ENV_VAR
    root = Path(explicit).expanduser()
    if not root.is_dir():
        raise MetrobenchError(f"benchmark root {root} (from {source}) is not a directory")
    for sub in ("cases", "data/systems", "data/splits"):
        if not (root / sub).is_dir():
            raise MetrobenchError(
                f"benchmark root {root} (from {source}) has no {sub}/ folder; "
                "expected the layout of the public MetroLLM-Bench repository"
            )
    return root


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, read in blocks so large files do not fill memory."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_checksums(root: Path, files: list[str] | None = None) -> list[str]:
    """Check the pinned files under ``root``; return the relative paths checked.

    Raises :class:`DataError` naming the first file that is missing or differs,
    with both digests, so the user knows exactly which file to restore.
    """
    pinned = pinned_release().sha256
    names = sorted(pinned) if files is None else files
    for name in names:
        expected = pinned.get(name)
        if expected is None:
            raise MetrobenchError(f"{name} is not a pinned benchmark file")
        path = root / name
        if not path.is_file():
            raise DataError(str(path), "missing (the pinned release has this file)")
        actual = sha256_file(path)
        if actual != expected:
            raise DataError(
                str(path),
                f"SHA-256 {actual} differs from the pinned release's {expected}; "
                "this file was modified or comes from another commit",
            )
    return names


#: Roots whose pinned files this process has already verified.
_VERIFIED: set[Path] = set()


def verify_once(root: Path) -> None:
    """:func:`verify_checksums` for ``root``, done at most once per process (it passed: no rework)."""
    key = Path(root).resolve()
    if key not in _VERIFIED:
        verify_checksums(key)
        _VERIFIED.add(key)


def fetch(dest: Path, *, repository: str | None = None, commit: str | None = None,
          verify: bool = True) -> Path:
    """Clone the benchmark repository at the pinned commit into ``dest``.

    Fetches only that commit (shallow), checks it out detached and verifies the
    digests. An existing checkout at the right commit is reused, so the rule
    that calls this is idempotent.
    """
    release = pinned_release()
    repository = repository or release.repository
    commit = commit or release.commit
    if shutil.which("git") is None:
        raise MetrobenchError("git is needed to fetch the benchmark data but was not found on PATH")
    dest = Path(dest)
    if (dest / ".git").is_dir():
        head = _git(["rev-parse", "HEAD"], cwd=dest).strip()
        if head != commit:
            raise MetrobenchError(
                f"{dest} is a checkout of {head}, not the pinned commit {commit}; "
                "remove it or point --dest elsewhere"
            )
    else:
        if dest.exists() and any(dest.iterdir()):
            raise MetrobenchError(f"{dest} exists and is not empty; refusing to fetch into it")
        dest.mkdir(parents=True, exist_ok=True)
        try:
            _git(["init", "--quiet"], cwd=dest)
            _git(["fetch", "--quiet", "--depth", "1", repository, commit], cwd=dest)
            _git(["checkout", "--quiet", "--detach", "FETCH_HEAD"], cwd=dest)
        except MetrobenchError:
            shutil.rmtree(dest, ignore_errors=True)  # no half-made checkout for the next try
            raise
    if verify:
        verify_checksums(dest)
    return dest


def _git(args: list[str], *, cwd: Path) -> str:
    import subprocess  # here, not at the top: only fetching needs it, every command imports this module

    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise MetrobenchError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout
