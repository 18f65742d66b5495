"""Locating, verifying and fetching the benchmark root.

The benchmark root is a folder laid out like the public MetroLLM-Bench repository
(``cases/``, ``data/systems/``, ``data/splits/``). metrobench never copies it: it
reads it from a configured path (``--data``, the config's ``data.path``), from
``METROBENCH_DATA``, from the shared copy beside the checkout (``../shared/metrollm-bench``),
or from a clone of the pinned commit that :func:`fetch` makes (``.data/metrollm-bench``,
where ``make`` puts it): :func:`locate_root`, the one order the commands and the workflow
both follow (the workflow clones into its results folder when none of them is there).
Every file whose content decides a score is pinned by SHA-256, so a modified or
truncated copy is caught before a single case runs. The stages that read ground truth (``rule-agent``,
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


#: Where the benchmark is looked for when neither a path nor ``METROBENCH_DATA`` names it, relative
#: to the working folder (a checkout): the shared copy beside it, then the Makefile's pinned clone.
FALLBACKS: tuple[tuple[str, str], ...] = (("../shared/metrollm-bench", "the shared copy"),
                                          (".data/metrollm-bench", "the pinned clone"))
_LAYOUT = ("cases", "data/systems", "data/splits")


def locate_root(explicit: str | os.PathLike[str] | None = None, *, source: str = "--data",
                base: Path | None = None) -> tuple[Path | None, str]:
    """Where the benchmark root is and what said so: ``explicit`` (named ``source``), else
    ``$METROBENCH_DATA``, else the first of :data:`FALLBACKS` under ``base`` (default: the working
    folder) laid out as a benchmark root; ``(None, "")`` when none is. Only the fallbacks are
    checked here: a named path is returned as named, for :func:`resolve_root` to judge."""
    if explicit is not None:
        return Path(explicit).expanduser(), source
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser(), ENV_VAR
    base = Path.cwd() if base is None else base
    for relative, what in FALLBACKS:
        if all((base / relative / sub).is_dir() for sub in _LAYOUT):
            return Path(relative) if base == Path.cwd() else base / relative, f"{what} {relative}"
    return None, ""


def resolve_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Return the benchmark root :func:`locate_root` finds (--data, ``METROBENCH_DATA``, the fallbacks).

    Raises a :class:`MetrobenchError` naming every source when none is there,
    and naming the missing sub-folder when the path is not a benchmark root.
    """
    found, source = locate_root(explicit)
    if found is None:
        raise MetrobenchError(
            f"no benchmark root given: pass --data ROOT or set {ENV_VAR} (nor is there "
            f"{' or '.join(relative for relative, _ in FALLBACKS)} here; "
            "run `metrobench fetch-data --dest DIR` to clone the pinned release)"
        )
    root = found
    if not root.is_dir():
        raise MetrobenchError(f"benchmark root {root} (from {source}) is not a directory")
    for sub in _LAYOUT:
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
