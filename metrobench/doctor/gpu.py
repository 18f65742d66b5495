"""torch and the GPU: the CUDA device and the bitsandbytes backend (:func:`check_torch`), each GPU
job's memory estimate against the configured card and that card against the device torch sees
(:func:`check_gpu_fit`, :mod:`metrobench.footprint`), and the gated-delta path the students train
on with its cost (:func:`check_training_path`, :func:`fla_refusal`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from typing import TYPE_CHECKING

from metrobench.doctor.needs import Check, StudyNeeds
from metrobench.doctor.packages import package_version

if TYPE_CHECKING:
    from metrobench.study import StudyConfig


def check_torch(needs: StudyNeeds) -> list[Check]:
    need = "FAIL" if needs.students else "warn"
    if importlib.util.find_spec("torch") is None:
        return [Check(need, "torch", "not installed (training needs it): make install")]
    import torch

    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        gpu = Check("ok", "cuda", f"{torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}, "
                    f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free")
    else:
        status = "FAIL" if needs.gpu_training else "ok"
        gpu = Check(status, "cuda", "no CUDA device" + (": the students' billion-parameter bases "
                                                         "need one" if needs.gpu_training else
                                                         " (CPU training: tiny models only)"))
    bnb = package_version("bitsandbytes")
    backend = "cuda" if torch.cuda.is_available() else "cpu"
    bnb_check = Check("ok" if bnb else need, "bitsandbytes",
                      f"{bnb}, {backend} backend" if bnb else "not installed")
    return [Check("ok", "torch", f"{torch.__version__}"), gpu, bnb_check]


def _device_gib() -> tuple[str, float] | None:
    """(name, GiB) of the CUDA device torch sees, else None (no torch, or no CUDA)."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0), torch.cuda.mem_get_info()[1] / 2**30


def check_gpu_fit(study: StudyConfig | None, device=_device_gib) -> list[Check]:
    """Every GPU job's memory estimate against the configured card (``gpu``), and that card against
    the device torch sees: a card smaller than configured is a failure, no device a note."""
    from metrobench.footprint.fit import refusal, study_lock, study_needs
    from metrobench.footprint.gguf_header import GgufError

    if study is None or study.gpu is None:
        return []
    gpu = study.gpu
    try:
        needs = study_needs(study, study_lock(study))
    except GgufError as exc:           # a served file that does not read: no estimate to hold to the card
        return [Check("FAIL", "gpu memory", str(exc))]
    card = f"{gpu.name}, {gpu.memory_gib:g} GiB"
    problem = refusal(study, needs, "gpu memory")
    top = max(needs, key=lambda need: need.gib, default=None)
    checks = [Check("FAIL" if problem and gpu.enforce else "warn" if problem else "ok", "gpu memory",
                    problem.removeprefix("gpu memory: ") if problem else
                    f"{len(needs)} GPU jobs fit the {card} with {gpu.headroom_gib:g} GiB free" +
                    (f" (largest: {top.job} {top.name}, {top.shown()} GiB)" if top else ""))]
    seen = device()
    if seen is None:
        checks.append(Check("ok", "gpu card", f"no CUDA device here: the estimates are held against the "
                                              f"configured {card}"))
    else:
        name, total = seen
        short = total < gpu.memory_gib * 0.97   # a card reports a little less than its label
        checks.append(Check("FAIL" if short else "ok", "gpu card",
                            f"{name}: {total:.1f} GiB, the config says {card}" +
                            ("; set gpu.memory_gib to this card's" if short else "")))
    return checks


#: Minutes a seed of the paper's students took on an RTX 5090 with the kernels (App. C,
#: Table 8; peft/recipes/<size>.yaml), by billions of parameters.
PAPER_TRAIN_MINUTES = {2.0: 27, 4.0: 63, 9.0: 74, 27.0: 103}


def _gated_delta(base: str) -> bool:
    """A student base with Qwen3.5's gated-delta (linear-attention) layers, from its name."""
    return re.search(r"qwen3(\.[5-9]|_5)", base, re.IGNORECASE) is not None


#: Triton releases with which flash-linear-attention 0.6.0 refuses its gated backward on Hopper
#: (compute capability 9.x: "produces incorrect results for gated chunk_bwd_dqkwg", fla #640).
#: Met by the GPU kit on an H200 (benchmarks/recorded/gpu-kit-h200-2026-12-04).
FLA_BAD_TRITON_ON_HOPPER = ((3, 4, 0), (3, 7, 1))


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def fla_refusal(capability: tuple[int, int] | None, triton: str | None) -> str | None:
    """Why flash-linear-attention will stop at the first backward on this GPU, or None."""
    if capability is None or capability[0] != 9 or not triton:
        return None
    low, high = FLA_BAD_TRITON_ON_HOPPER
    if not low <= _version_tuple(triton) < high:
        return None
    return (f"flash-linear-attention refuses its gated backward on Hopper GPUs with Triton {triton} "
            f"(>= 3.4.0 and < 3.7.1): install triton>=3.7.1 or tilelang, or uninstall the kernels "
            "to train on the PyTorch path")


def _gpu_and_triton() -> tuple[tuple[int, int] | None, str | None]:
    import torch

    capability = tuple(torch.cuda.get_device_capability(0)) if torch.cuda.is_available() else None
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    return capability, triton


def check_training_path(needs: StudyNeeds, path_of=None, cuda: bool | None = None,
                        gpu_and_triton=None) -> list[Check]:
    """Which gated-delta path the students' training takes, and what it costs.

    The path is :func:`metrobench.training.train.gated_delta_path`'s (the line ``metrobench
    train`` logs). Without both kernels a CUDA student is slower than the paper's minutes a
    seed, which the plan assumes: a warning naming the command that installs them.
    """
    gated = sorted((s for s, base in needs.student_bases.items() if _gated_delta(base)),
                   key=lambda s: (needs.student_billions.get(s, 0.0), s))
    if not needs.students:
        return []
    if not gated:
        return [Check("ok", "training path", f"{', '.join(sorted(needs.student_bases))}: no gated-delta "
                      "layers (no kernels needed)")]
    if path_of is None:
        from metrobench.training.train import gated_delta_path as path_of
    path = path_of()
    kernels = path.endswith("kernels") and "+" in path   # both installed and importable
    if cuda is None:
        cuda = importlib.util.find_spec("torch") is not None and _cuda_available()
    sizes = [needs.student_billions.get(s, 0.0) for s in gated]
    minutes = sorted({PAPER_TRAIN_MINUTES[b] for b in sizes if b in PAPER_TRAIN_MINUTES})
    paper = (f"the paper's {minutes[0]}–{minutes[-1]} min a seed" if len(minutes) > 1 else
             f"the paper's {minutes[0]} min a seed" if minutes else "the paper's minutes a seed")
    who = ", ".join(gated)
    if not needs.gpu_training:
        return [Check("ok", "training path", f"{who}: gated-delta layers on the {path} (CPU-sized students: "
                      "the kernels would not matter)")]
    if path.startswith("flash-linear-attention") and cuda:
        refused = fla_refusal(*(gpu_and_triton or _gpu_and_triton)())
        if refused:
            return [Check("FAIL", "training path", f"{who}: {refused}")]
    if kernels and cuda:
        return [Check("ok", "training path", f"{who}: gated-delta layers on the {path}: about {paper} "
                      "(RTX 5090) as the plan assumes")]
    if kernels:
        return [Check("warn", "training path", f"{who}: {path} installed, but no CUDA device to run them")]
    loop = "the PyTorch chunk loop, " if path.startswith("PyTorch") else ""
    return [Check("warn", "training path", f"{who}: gated-delta layers on the {path}: {loop}slower than "
                  f"{paper} (RTX 5090) that the plan assumes; on the CUDA machine `make install TRAIN_CUDA=1` "
                  "installs the kernels")]


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())
