"""What the study reads: the study config itself (:func:`load_config`: one that does not validate is
a failure reported beside the checks that need none), the API keys of its hosted models and judge
(names only, never a value), the models lock, the GGUF files its rows name, and the benchmark root
with its pinned SHA-256 digests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.doctor.needs import Check, StudyNeeds
from metrobench.errors import MetrobenchError

if TYPE_CHECKING:
    from metrobench.study import StudyConfig


def check_keys(needs: StudyNeeds) -> list[Check]:
    checks = []
    for env, who in sorted(needs.key_envs.items()):
        present = bool(os.environ.get(env))
        checks.append(Check("ok" if present else "FAIL", "api key",
                            f"{env} {'is set' if present else 'is not set'} (needed by {who})"))
    return checks or [Check("ok", "api keys", "none needed by this config")]


def check_lock(study: StudyConfig | None) -> list[Check]:
    """The models lock against the config: one line, naming the command that mends it."""
    from metrobench.hub.lock import lock_problems, read_lock, unlocked

    if study is None or not (study.downloads.gguf or study.downloads.bases):
        return []
    path = study.downloads.lock
    try:
        lock = read_lock(path)
    except MetrobenchError as exc:
        return [Check("FAIL", "models lock", str(exc))]
    problems, missing = lock_problems(study.downloads, lock, path), unlocked(study.downloads, lock)
    if problems:
        return [Check("FAIL", "models lock", problems[0])]
    if missing:
        total = len(study.downloads.gguf) + len(study.downloads.bases)
        return [Check("FAIL", "models lock", f"{len(missing)} of {total} model downloads not locked yet ({missing[0]}, ...): run `metrobench lock` first (hub "
                      f"metadata only, no download), then commit {path}")]
    return [Check("ok", "models lock", f"{path}: {len(lock.gguf)} GGUF files and {len(lock.bases)} bases locked")]


def unreadable_ggufs(needs: StudyNeeds, base: Path) -> list[str]:
    """``model: error`` for each present GGUF whose header does not read (bounded, metadata only:
    :mod:`metrobench.footprint.gguf_header`). Why here: a truncated transfer or an HTML page saved under
    the file's name is present, so "all GGUFs present" alone would call the study ready."""
    from metrobench.footprint.architectures import header_arch
    from metrobench.footprint.gguf_header import GgufError

    broken = []
    for name, path in needs.ggufs.items():
        if (base / path).is_file():
            try:
                header_arch(base / path)
            except GgufError as exc:
                broken.append(f"{name}: {exc}")
    return broken


def check_models(needs: StudyNeeds, base: Path, study: StudyConfig | None = None) -> list[Check]:
    fetched = set(study.downloads.gguf) if study is not None else set()
    missing = [f"{name} ({path})" for name, path in needs.ggufs.items()
               if not (base / path).is_file() and path not in fetched]
    if not needs.ggufs:
        return []
    if missing:
        return [Check("FAIL", "model files", f"{len(missing)} of {len(needs.ggufs)} GGUFs missing: "
                      + ", ".join(missing[:4]) + (" …" if len(missing) > 4 else ""))]
    broken = unreadable_ggufs(needs, base)
    if broken:
        return [Check("FAIL", "model files", broken[0] + (f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""))]
    later = sum(1 for path in needs.ggufs.values() if not (base / path).is_file())
    return [Check("ok", "model files", f"all {len(needs.ggufs)} GGUFs present" if not later else
                  f"{len(needs.ggufs) - later} of {len(needs.ggufs)} GGUFs present, {later} fetched by the "
                  f"workflow from the lock")]


def check_data(explicit: str | None, needs: StudyNeeds, base: Path) -> Check:
    from metrobench.data import verify_checksums
    from metrobench.data.root import resolve_root

    candidate = explicit or os.environ.get("METROBENCH_DATA") or \
        (str(base / needs.data_path) if needs.data_path else None)
    try:
        root = resolve_root(candidate)
        checked = verify_checksums(root)
    except MetrobenchError as exc:
        return Check("FAIL", "data", str(exc))
    return Check("ok", "data", f"{root}: {len(checked)} files match the pinned digests")


def load_config(paths: list[str]) -> tuple[StudyConfig | None, Check]:
    """The study config and its check: a config that does not load is a failure to report
    beside the checks that need no config (Python, disk, data), not a reason to stop."""
    from metrobench.study import load_study

    try:
        study = load_study(paths)
    except MetrobenchError as exc:
        return None, Check("FAIL", "config", str(exc))
    return study, Check("ok", "config", f"{', '.join(paths)}: valid")
