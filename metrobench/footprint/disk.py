"""Every file a plan fetches and writes, against free space: the peak disk a study needs.

Contract: :func:`disk_plan` adds, in GB (10^9 bytes):

* ``served GGUFs``: each GGUF a local row serves (its file's size when present, else its
  lock entry's, else parameters x its file type's bits a weight);
* ``bases``: each student base in the Hugging Face cache (the lock's file sizes, else 2 GB
  a billion parameters: bf16);
* ``student GGUFs``: per student seed its Q4_K_M GGUF (0.6 GB a billion), kept;
* ``merged + f16``: per seed its merged bf16 folder and f16 GGUF (2 + 2 GB a billion): every
  seed's when they are kept (``peft_temporary: false``), else one seed's at a time, the
  largest (Snakemake deletes each once its GGUF is written, and training, one job at a time
  on the GPU, paces the seeds; a scheduler that ran two seeds' exports at once would hold
  two);
* ``margin``: :data:`MARGIN_GB` for results, logs and transcripts.

``present`` is what of it already lies on disk (served GGUFs, bases' download stamps,
students' Q4_K_M files), so the space still needed is ``peak - present``.
:func:`study_disk` counts every file the config can make (``doctor``); :func:`jobs_disk`
only those a plan's jobs make (``metrobench plan``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metrobench.footprint import GB

if TYPE_CHECKING:
    from metrobench.hub.lock import LockFile
    from metrobench.study import StudyConfig

MARGIN_GB = 20.0
#: GB a student writes per billion parameters of its base (doctor.py's figures).
GB_PER_BILLION = {"cache": 2.0, "merged": 2.0, "f16": 2.0, "q4": 0.6}


@dataclass
class DiskPlan:
    parts: dict[str, float] = field(default_factory=dict)   # GB by kind
    present: float = 0.0                                    # GB of it already on disk
    peft_temporary: bool = False

    @property
    def peak(self) -> float:
        return sum(self.parts.values())

    @property
    def needed(self) -> float:
        """GB still to be written at the peak (what free space must hold)."""
        return self.peak - self.present

    def describe(self) -> str:
        kept = "one seed's at a time: peft_temporary" if self.peft_temporary else "every seed's, kept"
        parts = ", ".join(f"{name} {value:.0f}" + (f" ({kept})" if name == "merged + f16" else "")
                          for name, value in self.parts.items())
        return f"{self.peak:.0f} GB at its peak ({parts}); {self.present:.0f} GB of it already on disk"


def billions(student: str) -> float:
    """Parameters of a student's base in billions, from its name (``27b``, ``27b-corrected``); 0 for test models."""
    match = re.match(r"(\d+(?:\.\d+)?)b(?![a-z0-9])", student)
    return float(match.group(1)) if match else 0.0


def gguf_gb(path: str, lock: LockFile | None) -> tuple[float, bool]:
    """(GB, present) of a served GGUF: the file's, the lock's, else parameters x bits a weight (0 if unknown)."""
    from metrobench.footprint.architectures import BITS_PER_WEIGHT, quant_of, table_arch

    file = Path(path)
    if file.is_file():
        return file.stat().st_size / GB, True
    if lock is not None and path in lock.gguf:
        return lock.gguf[path].size / GB, False
    arch, bits = table_arch(file.name), BITS_PER_WEIGHT.get(quant_of(path) or "")
    return (arch.params_b * bits / 8 if arch and bits else 0.0), False


def base_gb(study: StudyConfig, repo: str, size: str, lock: LockFile | None) -> tuple[float, bool]:
    from metrobench import layout

    present = Path(layout.base_stamp(repo, study.results)).is_file()
    if lock is not None and repo in lock.bases:
        return sum(f.size for f in lock.bases[repo].files.values()) / GB, present
    return billions(size) * GB_PER_BILLION["cache"], present


def disk_plan(study: StudyConfig, lock: LockFile | None, ggufs: Iterable[str],
              bases: dict[str, str], seeds: Iterable[tuple[str, str]]) -> DiskPlan:
    """The disk of these served GGUFs, bases (repo -> a student size training on it) and (size, seed) students."""
    from metrobench import layout

    out = DiskPlan(peft_temporary=study.peft_temporary)
    served = [gguf_gb(path, lock) for path in sorted(set(ggufs))]
    cached = [base_gb(study, repo, size, lock) for repo, size in sorted(bases.items())]
    seeds = sorted(set(seeds))
    q4 = [billions(size) * GB_PER_BILLION["q4"] for size, _ in seeds]
    steps = [billions(size) * (GB_PER_BILLION["merged"] + GB_PER_BILLION["f16"]) for size, _ in seeds]
    out.parts = {"served GGUFs": sum(gb for gb, _ in served), "bases": sum(gb for gb, _ in cached),
                 "student GGUFs": sum(q4),
                 "merged + f16": max(steps, default=0.0) if study.peft_temporary else sum(steps),
                 "margin": MARGIN_GB}
    paths = layout.under(study.results)
    out.present = sum(gb for gb, here in [*served, *cached] if here) + \
        sum(gb for gb, (size, seed) in zip(q4, seeds) if Path(paths.quantized_gguf(size, seed)).is_file())
    return out


def _local_ggufs(study: StudyConfig, models: Iterable[str]) -> set[str]:
    from metrobench.footprint.serving import served

    found = set()
    for model in models:
        what = served(study, model)
        if what is not None and what.file == what.named:   # a configured row, not a student
            found.add(what.file)
    return found


def _base_of(study: StudyConfig, size: str) -> str:
    from metrobench.training.recipe import load_recipe

    return load_recipe(study.students[size].recipe).base


def study_disk(study: StudyConfig, lock: LockFile | None) -> DiskPlan:
    """Every file the config can make: all served GGUFs, every student's base and seeds."""
    bases = {_base_of(study, size): size for size in study.students}
    bases = {repo: size for repo, size in bases.items() if repo in study.downloads.bases}
    seeds = [(size, str(seed)) for size, spec in study.students.items() for seed in spec.seeds]
    return disk_plan(study, lock, _local_ggufs(study, study.models), bases, seeds)


def jobs_disk(study: StudyConfig, lock: LockFile | None, jobs: Iterable[Any]) -> DiskPlan:
    """The files a plan's jobs make: fetched GGUFs and bases, and each (size, seed) the jobs train or export."""
    ggufs, bases, seeds = set(), {}, set()
    base_sizes = {_base_of(study, size): size for size in study.students}
    for job in jobs:
        wildcards = job.wildcards
        if job.rule == "fetch_gguf" and "gguf" in wildcards:
            ggufs.add(wildcards["gguf"])
        elif job.rule == "fetch_base" and "base" in wildcards:
            bases[wildcards["base"]] = base_sizes.get(wildcards["base"], "")
        elif job.rule in ("train", "merge", "gguf", "quantize") and {"size", "seed"} <= set(wildcards):
            seeds.add((wildcards["size"], wildcards["seed"]))
    return disk_plan(study, lock, ggufs, bases, seeds)


def free_gb(results: Path) -> float:
    """Free GB on the file system the results folder is (or will be) on."""
    import shutil

    probe = Path(results).absolute()
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free / GB
