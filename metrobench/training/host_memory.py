"""Return a CPU training's freed activations to the system instead of keeping them in the heap.

glibc's malloc serves a large allocation with its own mmap (returned to the system
when freed) only above a threshold that it raises, up to 32 MiB, each time such a
block is freed. A CPU training frees and allocates activations of a few MiB to tens of
MiB at every layer (at SmolLM2-135M's widths and 4,608 tokens: 10.6 MiB a hidden
state, 28 MiB an MLP activation), so after the first step they all land in the heap,
where fragmentation keeps what was freed: one step of the demo's student peaked at
9.5 GB with activation checkpointing on, where its live tensors never exceed about
2 GB. Fixing the threshold at 1 MiB (``mallopt(M_MMAP_THRESHOLD)``, which also stops
the adjustment) gives every such tensor its own mapping, freed when the tensor is:
the same step peaks at about a third (docs/benchmarks.md has the figures and commands).

:func:`limit_heap_retention` is called once, before training, by ``metrobench train`` and
``benchmarks/train_step.py``. It changes where memory comes from, never a value
computed. A no-op outside glibc (macOS, musl) and when the environment already sets
``MALLOC_MMAP_THRESHOLD_`` (a user's own choice wins).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

#: mallopt's parameter number for the mmap threshold (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
#: Allocations from this size up get their own mapping.
THRESHOLD_BYTES = 1 << 20


def limit_heap_retention(threshold: int = THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; whether it was set."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: musl and macOS lack it
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, threshold) == 1
