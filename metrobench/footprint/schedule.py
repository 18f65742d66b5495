"""How long a plan's GPU jobs take on one card: one at a time, or packed side by side by memory.

Contract: :func:`simulate` is a list schedule of :class:`GpuJob` s on one card, with no clock and
no I/O: at time 0 and whenever a job ends, the ready jobs (every group a job waits for, ``after``,
finished), taken in list order (``rank``, then the larger memory first, then the name), start
while they fit: at most ``max_jobs`` at once, and their memory estimates summed within
``capacity_gib``. A job whose estimate is larger than the capacity, or unknown (``None``), takes
the whole capacity and so runs alone, as Snakemake caps a job's request at what ``--resources``
offers. While ``k`` jobs share the card each advances at ``speed(k)`` of its speed alone
(:func:`full_speed`: side by side costs nothing, the bound; :func:`no_gain`: the card's work rate
does not grow with ``k``, so packing gains nothing). The :class:`Schedule` gives the makespan
(the last job's end) and each job's start and end.

:func:`plan_jobs` turns a plan's rows (:class:`metrobench.plan.PlanRow`: stage, model, jobs,
GPU-seconds, the largest memory estimate of its jobs) into jobs, a row's GPU-seconds split evenly
over its jobs (a run with no estimate takes the whole card, one served on the CPU none, as their
``gpu_mem_mib`` in the workflow), with the study's dependencies roughly: the teachers' runs first, each student
size's training after all of them, each student's runs after its size's training; every other
run waits for nothing. The CPU stages between (scoring the traces, the training set, merge,
GGUF export, quantisation) take no time here. :func:`makespans` runs the plan both ways on the
configured card (``gpu``): one at a time (the workstation profile, ``gpu=1``), and packed by
memory as ``profiles/packed`` offers the card (its memory less ``headroom_gib``, at most
:data:`PACKED_JOBS` GPU jobs at once), at full speed side by side: a lower bound on the packed
makespan until the serving kit measures what two servers side by side really do.

Why a simulation and not a sum: one at a time the card never waits (some job is always ready),
so the makespan is the GPU-hours; packed, what runs beside what depends on the memory of each and
on the order training forces, which a sum of hours cannot say.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from metrobench import layout

if TYPE_CHECKING:
    from metrobench.footprint.fit import GpuNeed
    from metrobench.study import StudyConfig

#: GPU jobs at once the packed profile allows (profiles/packed/config.yaml, resources gpu=3): the
#: serving kit measures two and three servers side by side, no more.
PACKED_JOBS = 3
TEACHERS = "teachers"
#: A stage's place in the list order (lower first); a stage not named here comes last.
STAGE_RANK = {"teacher runs": 0, "train": 1, "runs": 2}
_EPS = 1e-9


@dataclass(frozen=True)
class GpuJob:
    """One GPU job: its time alone on the card, its memory, and what it waits for."""

    name: str
    seconds: float
    gib: float | None            # its memory estimate; None: unknown, it takes the whole card
    rank: int = 0                # list order: lower starts first among the ready jobs
    group: str = ""              # the group later jobs wait for
    after: frozenset[str] = frozenset()   # groups every job of which must have ended first


@dataclass
class Schedule:
    """A simulated schedule: when each job started and ended (seconds from the first start)."""

    makespan_s: float
    starts: dict[str, float] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)
    most_at_once: int = 0


def full_speed(k: int) -> float:
    """Side by side costs nothing: each of ``k`` jobs runs as fast as alone (the bound)."""
    return 1.0


def no_gain(k: int) -> float:
    """The card's work rate does not grow with ``k``: each of ``k`` jobs runs at ``1/k`` of its speed."""
    return 1.0 / k


def _order(job: GpuJob) -> tuple[int, float, str]:
    return job.rank, -(job.gib if job.gib is not None else float("inf")), job.name


def simulate(jobs: Iterable[GpuJob], capacity_gib: float | None = None, max_jobs: int | None = None,
             speed: Callable[[int], float] = full_speed) -> Schedule:
    """The list schedule of ``jobs`` (see the module docstring); ``capacity_gib`` None: memory does not
    limit, ``max_jobs`` None: the count does not. A job waiting for a group that can never end (its
    own, or a cycle) is a ValueError naming it."""
    pending = sorted(jobs, key=_order)
    names = Counter(job.name for job in pending)
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        raise ValueError(f"jobs named twice: {', '.join(twice[:3])}")
    if max_jobs is not None and max_jobs < 1:
        raise ValueError(f"max_jobs {max_jobs}: at least 1")
    if capacity_gib is not None and capacity_gib <= 0:
        raise ValueError(f"capacity_gib {capacity_gib:g}: must be positive")
    left = Counter(job.group for job in pending)           # jobs of each group not ended yet
    running: dict[str, tuple[GpuJob, float]] = {}           # name -> (job, seconds of work left)
    out = Schedule(0.0)
    now = 0.0

    def need(job: GpuJob) -> float:
        if capacity_gib is None:
            return 0.0
        return capacity_gib if job.gib is None else min(job.gib, capacity_gib)

    while pending or running:
        free = None if capacity_gib is None else capacity_gib - sum(need(job) for job, _ in running.values())
        for job in list(pending):
            if max_jobs is not None and len(running) >= max_jobs:
                break
            if any(left[group] for group in job.after):
                continue
            if free is not None and need(job) > free + _EPS:
                continue
            pending.remove(job)
            running[job.name] = (job, max(0.0, job.seconds))
            out.starts[job.name] = now
            free = None if free is None else free - need(job)
        if not running:
            waiting = pending[0]
            raise ValueError(f"job {waiting.name} waits for {', '.join(sorted(waiting.after))}, which never "
                             "end(s): a cycle, or a group that waits for itself")
        out.most_at_once = max(out.most_at_once, len(running))
        rate = speed(len(running))
        if rate <= 0:
            raise ValueError(f"speed({len(running)}) is {rate:g}: must be positive")
        step = min(work for _, work in running.values()) / rate
        now += step
        for name, (job, work) in list(running.items()):
            work -= step * rate
            if work <= _EPS * max(1.0, job.seconds):
                del running[name]
                out.ends[name] = now
                left[job.group] -= 1
            else:
                running[name] = (job, work)
    out.makespan_s = now
    return out


class PlannedRow(Protocol):
    """What :func:`plan_jobs` reads of a plan's row (:class:`metrobench.plan.PlanRow`)."""

    stage: str
    model: str
    jobs: int
    gpu_s: float | None
    gpu: GpuNeed | None


def plan_jobs(rows: Iterable[PlannedRow], study: StudyConfig) -> list[GpuJob] | None:
    """The GPU jobs of a plan's rows (see the module docstring); None when a row's GPU time is unknown
    (a ``?`` in the plan). A row with no GPU time (hosted, scripted, done) has no job here."""
    seeds = study.seeds()
    out: list[GpuJob] = []
    for row in rows:
        if row.gpu_s is None:
            return None
        if row.gpu_s <= 0 or row.jobs <= 0:
            continue
        after: frozenset[str] = frozenset()
        group = f"{row.stage} {row.model}"
        if row.stage == "teacher runs":
            group = TEACHERS
        elif row.stage == "train":
            group, after = f"train {row.model}", frozenset({TEACHERS})
        elif row.stage == "runs":
            student = layout.student_of(seeds, row.model)
            if student is not None:
                after = frozenset({f"train {layout.student_group(student[0])}"})
        rank = STAGE_RANK.get(row.stage, len(STAGE_RANK))
        gib = row.gpu.gib if row.gpu is not None else None
        if gib is None and row.stage.endswith("runs") and not on_card(study, row.model):
            gib = 0.0            # served on the CPU: a GPU job slot, no card memory (its gpu_mem_mib is 0)
        out += [GpuJob(f"{row.stage} {row.model} #{i + 1}", row.gpu_s / row.jobs, gib, rank, group, after)
                for i in range(row.jobs)]
    return out


def on_card(study: StudyConfig, model: str) -> bool:
    """Whether a run with no estimate still puts layers on the card (an architecture the table lacks)."""
    from metrobench.footprint.serving import on_gpu, served

    what = served(study, model)
    return what is not None and on_gpu(what.serving)


@dataclass
class Makespans:
    """A plan's GPU jobs on one card, both ways (seconds; None: a job's time is unknown)."""

    jobs: int
    alone_s: float | None
    packed_s: float | None
    capacity_gib: float
    max_jobs: int
    most_at_once: int


def makespans(rows: Sequence[PlannedRow], study: StudyConfig, max_jobs: int = PACKED_JOBS) -> Makespans | None:
    """The plan one at a time and packed on the configured card (None: no card configured)."""
    if study.gpu is None:
        return None
    capacity = study.gpu.memory_gib - study.gpu.headroom_gib
    jobs = plan_jobs(rows, study)
    if jobs is None:
        return Makespans(sum(row.jobs for row in rows if row.gpu_s != 0), None, None, capacity, max_jobs, 0)
    alone = simulate(jobs, max_jobs=1)
    packed = simulate(jobs, capacity_gib=capacity, max_jobs=max_jobs)
    return Makespans(len(jobs), alone.makespan_s, packed.makespan_s, capacity, max_jobs, packed.most_at_once)


MIB = 1024      # MiB a GiB


def need_mib(gib: float | None, capacity_gib: float | None) -> int:
    """The GPU memory a job declares to Snakemake (resource ``gpu_mem_mib``, MiB as nvidia-smi counts):
    its estimate rounded up; with no estimate, the whole ``capacity_gib`` (it then runs alone); 0 with
    neither (no card configured: nothing to hold it against)."""
    if gib is None:
        return card_mib(capacity_gib) if capacity_gib is not None else 0
    return max(0, math.ceil(gib * MIB))


def card_mib(capacity_gib: float) -> int:
    """What the packed profile offers as ``gpu_mem_mib``: the card's memory less its headroom, rounded down."""
    return math.floor(capacity_gib * MIB)
