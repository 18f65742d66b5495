"""A llama-server's memory as it reports it, and that measurement carried to a model's full depth.

Contract:

* :func:`read_buffers` reads the buffer sizes llama.cpp logs while a server loads (at
  log verbosity 4, ``-lv 4``): ``load_tensors: CUDA0 model buffer size = 1234.00 MiB``,
  the ``output``, ``KV``, ``RS`` (recurrent state) and ``compute`` buffers the same
  way, one :class:`Buffer` each (a log without them: an empty list, never a guess);
* :func:`parts_of` sums them into the parts of :mod:`metrobench.footprint.serving`'s
  estimate (``weights``, ``kv``, ``recurrent``, ``compute``, and ``output``, which the
  estimate counts under compute), in GiB, for the buffers on the device (``CUDA0`` and
  the like; ``CUDA_Host`` and ``CPU_Mapped`` are host memory) or, for a server on the
  CPU, all of them;
* :func:`scaled_parts` carries parts measured on a model of :class:`Depth` ``at`` to
  one of depth ``full`` of the same widths: the blocks' weights by the bytes of a block
  (the measured buffer less the blocks' bytes the GGUF holds is the rest: output head,
  norms, padding), the KV cache by attention blocks, the recurrent state by recurrent
  blocks, compute and output buffers as measured (they depend on the widths, the
  context and the micro-batch, not on the depth). Exact for the KV cache and recurrent
  state, whose size llama.cpp computes per block; for the weights as exact as the
  blocks of the full-depth file are like the measured ones (the same file type can
  give some blocks more bits: llama-quantize's choice depends on a block's position).

Used by ``scripts/gpu-kit/serve.sh``, which measures random-weight GGUFs at a few
depths and writes both the measurement and its scaling beside the estimate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from metrobench.footprint import GIB

MIB = 2**20
#: ``<who>: <device> <kind> buffer size = <MiB> MiB`` as llama.cpp logs them.
BUFFER = re.compile(r"(?P<who>[A-Za-z_]+):\s+(?P<device>[A-Za-z_0-9]+)\s+(?P<kind>model|output|KV|RS|compute) "
                    r"buffer size =\s*(?P<mib>[0-9.]+) MiB")
#: A GPU device's buffer (``CUDA0``, ``ROCm1``, ``Vulkan0``); anything else is host memory.
DEVICE = re.compile(r"^(CUDA|ROCm|Vulkan|SYCL|Metal|MUSA)\d+$")
PART_OF = {"model": "weights", "KV": "kv", "RS": "recurrent", "compute": "compute", "output": "output"}
PARTS = ("weights", "kv", "recurrent", "compute", "output")


@dataclass(frozen=True)
class Buffer:
    """One buffer llama.cpp reported: its kind (model, output, KV, RS, compute), device and size."""

    kind: str
    device: str
    mib: float

    @property
    def on_device(self) -> bool:
        return bool(DEVICE.match(self.device))


@dataclass(frozen=True)
class Depth:
    """What the scaling needs of a model at one depth: its blocks by kind, and the bytes of all its blocks."""

    layers: int
    kv_layers: int
    block_bytes: float                 # bytes of every ``blk.*`` tensor of the GGUF (0 where unknown)

    @property
    def recurrent_layers(self) -> int:
        return self.layers - self.kv_layers


def read_buffers(log: str) -> list[Buffer]:
    """Every buffer size in a llama-server log (module docstring), in the order logged."""
    return [Buffer(m["kind"], m["device"], float(m["mib"])) for m in BUFFER.finditer(log)]


def parts_of(buffers: list[Buffer], *, device: bool = True) -> dict[str, float]:
    """GiB by part of the buffers on the GPU (``device``) or of all of them (a server on the CPU)."""
    parts = dict.fromkeys(PARTS, 0.0)
    for buffer in buffers:
        if buffer.on_device or not device:
            parts[PART_OF[buffer.kind]] += buffer.mib * MIB / GIB
    return parts


def _ratio(full: int, at: int, part: str) -> float:
    if at <= 0:
        if full > 0:
            raise ValueError(f"{part}: measured with no such block, asked for {full}")
        return 0.0
    return full / at


def scaled_parts(parts: dict[str, float], at: Depth, full: Depth) -> dict[str, float]:
    """``parts`` (GiB) measured at depth ``at``, carried to ``full`` (module docstring)."""
    blocks_at = at.block_bytes / GIB
    if blocks_at > parts["weights"] + 1e-9:
        raise ValueError(f"the blocks' {blocks_at:.3f} GiB are more than the {parts['weights']:.3f} GiB of weights "
                         "measured: the weights are not all on this device")
    rest = parts["weights"] - blocks_at
    blocks_full = full.block_bytes / GIB if full.block_bytes else blocks_at * _ratio(full.layers, at.layers, "blocks")
    return {"weights": rest + blocks_full,
            "kv": parts["kv"] * _ratio(full.kv_layers, at.kv_layers, "kv"),
            "recurrent": parts["recurrent"] * _ratio(full.recurrent_layers, at.recurrent_layers, "recurrent"),
            "compute": parts["compute"], "output": parts["output"]}
