"""One llama-server's peak GPU memory: weights on the GPU, KV cache, recurrent state, compute, context.

Contract: :func:`serving_estimate` adds, in GiB (2^30 bytes):

* ``weights``: the GGUF's bytes (the file's size when present, else its lock entry's, else
  parameters x the file type's bits a weight) less the token embedding, which llama.cpp
  keeps on the host (its input layer); with ``n_gpu_layers`` below the block count only
  that share of the blocks (and none of the output layer) is on the GPU;
* ``kv``: llama.cpp pads ``n_ctx`` up to a multiple of 256 and keeps that many cells in
  all, one pool with ``kv_unified`` or ``parallel`` equal shares without; each cell holds
  K and V of every attention block in the cache types (``-ctk``/``-ctv`` in
  ``serving.extra_args``, default f16); a sliding-window block keeps at most
  ``window x slots + 512`` cells; Qwen3.5's gated-delta blocks keep none;
* ``recurrent``: each slot's gated-delta state (convolution and delta-rule state, f32) in
  every recurrent block;
* ``compute``: the graph llama.cpp reserves for a 512-token micro-batch: the logits of the
  whole vocabulary (f32; 0.47 GiB at Qwen3.5's 248,320 tokens), flash attention's f16
  mask over the context, and the feed-forward activations;
* ``cuda``: the CUDA context and cuBLAS workspace (:data:`CUDA_CONTEXT_GIB`).

:func:`model_serving` finds what a configured model or a trained student serves (its
settings, its file, its architecture) in the study config; a model served on the CPU
(``n_gpu_layers: 0``) or with no known architecture has no estimate (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from metrobench.footprint import GIB
from metrobench.footprint.architectures import BITS_PER_WEIGHT, Arch, arch_of, quant_of

if TYPE_CHECKING:
    from metrobench.agents.runner.config import Serving
    from metrobench.hub.lock import LockFile
    from metrobench.study import StudyConfig

UBATCH = 512            # llama-server's default micro-batch (-ub)
CTX_PAD = 256           # llama.cpp pads n_ctx (and each slot's share) to this (llama-context.cpp)
CUDA_CONTEXT_GIB = 0.5
#: Bytes an element of a KV cache type (block types: bytes a block / elements a block).
CACHE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
               "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}
CACHE_FLAGS = {"k": ("-ctk", "--cache-type-k"), "v": ("-ctv", "--cache-type-v")}
STUDENT_QUANT = "Q4_K_M"


@dataclass
class ServingEstimate:
    """A server's GPU memory by part, in GiB, and what it rests on."""

    parts: dict[str, float]
    arch: Arch
    n_ctx: int
    weights_from: str              # "file", "lock" or "parameters"
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    @property
    def provisional(self) -> bool:
        return self.arch.provisional


def pad(value: int, to: int = CTX_PAD) -> int:
    return int(math.ceil(value / to) * to)


def cache_type(extra_args: list[str], which: str) -> str:
    """The KV cache type ``extra_args`` set for K or V (``-ctk q8_0``), else f16; given twice, the last one,
    as llama-server's argument parser keeps the last value of a flag."""
    flags = CACHE_FLAGS[which]
    found = "f16"
    for i, arg in enumerate(extra_args):
        name, eq, value = arg.partition("=")
        if name in flags:
            found = (value if eq else extra_args[i + 1] if i + 1 < len(extra_args) else "f16").lower()
    return found


def cells(n_ctx: int, parallel: int, kv_unified: bool) -> int:
    """The KV cells llama.cpp allocates in all: n_ctx padded, or each slot's padded share x slots."""
    if kv_unified or parallel <= 1:
        return pad(n_ctx)
    return pad(pad(n_ctx) // parallel) * parallel


def serving_estimate(arch: Arch, file_bytes: float, n_ctx: int, parallel: int = 2, kv_unified: bool = True,
                     n_gpu_layers: int = 999, k_type: str = "f16", v_type: str = "f16",
                     weights_from: str = "file", quant: str | None = None) -> ServingEstimate:
    """The parts of one server's GPU memory (see the module docstring)."""
    share = min(1.0, n_gpu_layers / arch.layers) if arch.layers else 1.0
    host = arch.host_bytes if arch.host_bytes is not None else \
        arch.vocab * arch.hidden * BITS_PER_WEIGHT.get(quant or "", 8.5) / 8
    weights = max(0.0, file_bytes - host) * share
    total_cells = cells(n_ctx, parallel, kv_unified)
    swa_cells = min(total_cells, pad(arch.swa_window * max(1, parallel) + UBATCH)) if arch.swa_layers else 0
    width = arch.kv_heads * (arch.key_length * CACHE_BYTES[k_type] + arch.value_length * CACHE_BYTES[v_type])
    full_layers = arch.kv_layers - arch.swa_layers
    kv = width * (full_layers * total_cells + arch.swa_layers * swa_cells) * share
    state = (max(0, arch.conv_kernel - 1) * arch.conv_channels + arch.state_floats) * 4
    recurrent = state * arch.recurrent_layers * max(1, parallel) * share
    logits = arch.vocab * UBATCH * 4
    mask = total_cells * UBATCH * 2
    activations = UBATCH * max(arch.ffn, 4 * arch.hidden) * 4 * 3
    parts = {"weights": weights / GIB, "kv": kv / GIB, "recurrent": recurrent / GIB,
             "compute": (logits + mask + activations) / GIB, "cuda": CUDA_CONTEXT_GIB}
    return ServingEstimate(parts, arch, total_cells, weights_from)


@dataclass
class Served:
    """What one model serves: its settings, the file it reads and the file that names its architecture."""

    model: str
    serving: Serving
    file: str                      # the GGUF the server loads (may not exist yet)
    named: str                     # the file whose name picks the table's entry (a student: its base's)
    quant: str | None


def served(study: StudyConfig, model: str) -> Served | None:
    """A configured model's or a trained student's serving, else None (hosted, or no llama-server)."""
    from metrobench import layout
    from metrobench.agents.runner.config import resolve_model_config

    student = layout.student_of(study.seeds(), model)
    if student is not None:
        size, seed = student
        if study.student_serving is None:
            return None
        serving = resolve_model_config(study.student_serving, "student").serving
        base = study.students[size].base_model
        base_served = served(study, base) if base in study.models else None
        if serving is None or base_served is None:
            return None
        file = layout.under(study.results).quantized_gguf(size, str(seed))
        return Served(model, serving, file, base_served.named, STUDENT_QUANT)
    entry = study.models.get(study.configured(model))
    if entry is None:
        return None
    if isinstance(entry, str) and not Path(entry).is_file():
        return None
    serving = resolve_model_config(entry, model).serving
    if serving is None or not serving.gguf:
        return None
    return Served(model, serving, serving.gguf, serving.gguf, quant_of(serving.gguf))


def file_size(path: str, lock: LockFile | None) -> tuple[float | None, str]:
    """A GGUF's bytes: the file's, else its lock entry's (None when neither is here)."""
    if Path(path).is_file():
        return float(Path(path).stat().st_size), "file"
    if lock is not None and path in lock.gguf:
        return float(lock.gguf[path].size), "lock"
    return None, "parameters"


def on_gpu(serving: Serving) -> bool:
    """Whether a serving puts layers on the GPU with llama-server (what the estimates cover)."""
    return serving.n_gpu_layers > 0 and serving.server == "llama-server"


def _estimate(serving: Serving, arch: Arch, size: float, source: str, quant: str | None) -> ServingEstimate:
    s = serving
    return serving_estimate(arch, size, s.n_ctx, s.parallel, s.kv_unified, s.n_gpu_layers,
                            cache_type(s.extra_args, "k"), cache_type(s.extra_args, "v"), source, quant)


def model_serving(study: StudyConfig, model: str, lock: LockFile | None = None) -> ServingEstimate | None:
    """A model's server estimate on the GPU, or None (hosted, CPU-served, or no known architecture).
    A served file that is here but does not read as a GGUF raises
    :class:`~metrobench.footprint.gguf_header.GgufError`: a truncated file's size or an HTML page's
    absence of widths must not become an estimate that "fits"."""
    what = served(study, model)
    if what is None or not on_gpu(what.serving):
        return None
    arch = arch_of(what.file) if Path(what.file).is_file() else arch_of(what.named)
    if arch is None:
        return None
    size, source = file_size(what.file, lock)
    if size is None:
        bits = BITS_PER_WEIGHT.get(what.quant or "")
        if bits is None:
            return None
        size = arch.params_b * 1e9 * bits / 8
    return _estimate(what.serving, arch, size, source, what.quant)


def file_serving(serving: Serving, file: Path) -> ServingEstimate | None:
    """The estimate of a server of ``serving`` loading ``file`` as it is on disk: the widths its header
    states and its own size (the run job's check, :func:`metrobench.footprint.fit.run_refusal`).

    Why apart from :func:`model_serving`: that one is asked at config load, before a fetch job has
    brought the file, so its widths may be the table's guesses; this one is asked once the file is
    here, just before llama-server would load it. A file that is not a readable GGUF raises
    :class:`~metrobench.footprint.gguf_header.GgufError` naming the file and the field (never an
    estimate from the table or from a broken file's size); None: not on the GPU or not here."""
    if not on_gpu(serving) or not file.is_file():
        return None
    arch = arch_of(file)
    if arch is None:
        return None
    return _estimate(serving, arch, float(file.stat().st_size), "file", quant_of(file))
