"""The configured card against the estimates: which served models and training jobs fit.

Contract: the study config's ``gpu`` (:class:`~metrobench.study.Gpu`: the card's name and
memory in GiB, the GiB kept free) is the card every local job runs on; unset (the CPU
studies) means no fit check. A job fits when its estimate plus ``headroom_gib`` is at most
``memory_gib``. :func:`study_needs` lists every GPU job a study can start (each served
model: configured llama.cpp rows and trained students; each student size's training) with
its estimate; :func:`refusal` words the first that does not fit as the one error line
``metrobench plan``, ``metrobench doctor`` and the workflow's start give (the workflow
checks every served model of the config, the plan only the jobs it plans). A GGUF that is not
on disk yet is estimated from the architecture table; one on disk that does not read as a GGUF
(truncated, an HTML page, a corrupt header) is the row's error, never an estimate; :func:`run_refusal` asks again in the
run job (``metrobench bench --gpu``), from the file's own header, before llama-server starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from metrobench.footprint import GB, GIB

if TYPE_CHECKING:
    from pathlib import Path

    from metrobench.agents.runner.config import ModelConfig
    from metrobench.footprint.serving import ServingEstimate
    from metrobench.hub.lock import LockFile
    from metrobench.study import Gpu, StudyConfig


@dataclass
class GpuNeed:
    """One GPU job's estimate (GiB) and what it is."""

    job: str                 # "serving" or "training"
    name: str                # the model, or the student size
    gib: float
    provisional: bool = False
    detail: str = ""         # the parts, for the error line

    def shown(self) -> str:
        """The estimate as a plan cell: ``32.3``, ``~29.0`` when it rests on provisional widths."""
        return ("~" if self.provisional else "") + f"{self.gib:.1f}"


def serving_need(study: StudyConfig, model: str, lock: LockFile | None) -> GpuNeed | None:
    """A served model's need, else None (not on the GPU); a served file here that does not read as a
    GGUF is the row's error (:class:`~metrobench.footprint.gguf_header.GgufError`, naming the model)."""
    from metrobench.footprint.gguf_header import GgufError
    from metrobench.footprint.serving import model_serving

    try:
        est = model_serving(study, model, lock)
    except GgufError as exc:
        raise GgufError(f"serving {model}: {exc}") from None
    return None if est is None else serving_need_of(model, est)


def serving_need_of(model: str, est: ServingEstimate) -> GpuNeed:
    """A server estimate as a job's need, its parts spelled out for the error line."""
    detail = ", ".join(f"{name} {value:.1f}" for name, value in est.parts.items() if value >= 0.05)
    detail += f" GiB at n_ctx {est.n_ctx:,}"
    return GpuNeed("serving", model, est.total, est.provisional, detail)


def training_need(study: StudyConfig, size: str) -> GpuNeed | None:
    """A student size's training need on the GPU (None when the study trains on the CPU): the
    larger of the estimate and the GPU kit's measurement of the same shape."""
    from metrobench.footprint.training import recipe_estimate, recipe_measured

    if not study.cuda_training or size not in study.students:
        return None
    student = study.students[size]
    parts = recipe_estimate(student.recipe, student.max_length)
    if parts is None:
        return None
    gib = parts["total"] * GB / GIB
    detail = f"QLoRA {student.recipe}: estimate {gib:.1f} GiB"
    seen = recipe_measured(student.recipe, student.max_length)
    if seen is not None:
        detail += f", measured {seen:.1f} GiB (GPU kit, H200)"
        gib = max(gib, seen)
    return GpuNeed("training", size, gib, detail=detail)


def fits(study: StudyConfig, need: GpuNeed) -> bool | None:
    """Whether a job fits the configured card (None: no card configured)."""
    return fits_card(study.gpu, need)


def fits_card(gpu: Gpu | None, need: GpuNeed) -> bool | None:
    """Whether a job fits this card (None: no card)."""
    if gpu is None:
        return None
    return need.gib + gpu.headroom_gib <= gpu.memory_gib


def refusal(study: StudyConfig, needs: list[GpuNeed], where: str) -> str | None:
    """The one line for the first job that does not fit the card (and how many more), else None."""
    return card_refusal(study.gpu, needs, where)


def card_refusal(gpu: Gpu | None, needs: list[GpuNeed], where: str) -> str | None:
    """:func:`refusal` against a card given by itself (the run job's ``--gpu``)."""
    over = [need for need in needs if fits_card(gpu, need) is False]
    if not over or gpu is None:
        return None
    first = over[0]
    more = f" (and {len(over) - 1} more: {', '.join(n.name for n in over[1:4])}{' ...' if len(over) > 4 else ''})" \
        if len(over) > 1 else ""
    fix = "lower its serving.n_ctx or use a smaller KV cache type (-ctk/-ctv)" if first.job == "serving" \
        else "shorten its recipe's max_length or batch"
    return (f"{where}: {first.job} {first.name} needs about {first.gib:.1f} GiB of GPU memory ({first.detail}), "
            f"more than the card's {gpu.memory_gib:g} GiB ({gpu.name}) less the {gpu.headroom_gib:g} GiB kept "
            f"free{more}: {fix}, or set gpu.enforce: false to start it anyway")


def run_refusal(cfg: ModelConfig, file: Path, gpu: Gpu | None) -> str | None:
    """The run job's check, just before llama-server loads ``file`` for ``cfg``: the refusal line when the
    server, estimated from the file's own header at the row's ``n_ctx`` and slots, does not fit ``gpu``.

    Why again at the run: the workflow's start checked every row before any job ran, but a GGUF not
    fetched yet was estimated from :mod:`~metrobench.footprint.architectures`' table, whose widths
    for several rows are guesses; a wider file would fail in llama-server with a CUDA allocation
    error. None: no card, ``gpu.enforce: false``, not served on the GPU, or it fits."""
    from metrobench.footprint.serving import file_serving

    if gpu is None or not gpu.enforce or cfg.serving is None:
        return None
    est = file_serving(cfg.serving, file)
    if est is None:
        return None
    need = serving_need_of(cfg.name, est)
    need.detail += f"; widths from {'its header' if est.arch.source != 'table' else 'the table, not its header'}"
    return card_refusal(gpu, [need], str(file))


def study_needs(study: StudyConfig, lock: LockFile | None = None) -> list[GpuNeed]:
    """Every GPU job the study can start: each served model (configured and students), each training size."""
    from metrobench import layout

    needs = [serving_need(study, model, lock) for model in [*study.models, *layout.student_models(study.seeds())]]
    needs += [training_need(study, size) for size in study.students]
    return [need for need in needs if need is not None]


def study_lock(study: StudyConfig) -> LockFile | None:
    """The models lock the study names (None when it does not read: the lock check says why)."""
    from metrobench.errors import MetrobenchError
    from metrobench.hub.lock import read_lock

    try:
        return read_lock(study.downloads.lock)
    except MetrobenchError:
        return None


def check_study(study: StudyConfig, where: str) -> str | None:
    """The workflow's start: the refusal line for the config's served models and training, if any."""
    from metrobench.footprint.gguf_header import GgufError

    if study.gpu is None or not study.gpu.enforce:
        return None
    try:
        needs = study_needs(study, study_lock(study))
    except GgufError as exc:          # a served file that does not read: no estimate, the row's error
        return f"{where}: {exc}"
    return refusal(study, needs, where)
