"""A CPU training's host memory: TRL's LM head in small tiles, freed activations returned to the system.

Besides the layers' activations (which activation checkpointing, a recipe setting, keeps to
one hidden state a layer), two things set the demo student's peak RAM on a CPU
(SmolLM2-135M, 4,608 tokens; docs/benchmarks.md has the figures and commands):

**The LM head's tiles.** TRL's fused LM head (TRL 1.16.0, pinned) never builds the
whole ``(tokens, vocabulary)`` logits: it scores the tokens in tiles of
``TOKEN_CHUNK_SIZE`` = 4,096 tokens by 32,768 vocabulary entries. With Triton (CUDA)
only the positions with a label are scored; without it, on a CPU, every position is,
and the tile's torch fallback holds about eight fp32 temporaries of the tile's size:
4.2 GB above the model for one 4,600-token sequence. :func:`tile_cpu_lm_head` sets the
tile to 512 tokens on a machine without CUDA: 0.46 GB, with bit-identical log
probabilities, entropies and gradients (each token's row is computed alone; the
vocabulary chunks, whose order the log-sum-exp depends on, are unchanged) and no
slower. CUDA keeps TRL's tiles.

**The heap.**
glibc's malloc serves a large allocation with its own mmap (returned to the system
when freed) only above a threshold that it raises, up to 32 MiB, each time such a
block is freed. A CPU training frees and allocates activations of a few MiB to tens of
MiB at every layer (at SmolLM2-135M's widths and 4,608 tokens: 10.6 MiB a hidden
state, 28 MiB an MLP activation), so after the first step they all land in the heap,
where fragmentation keeps what was freed. Fixing the threshold at 1 MiB
(``mallopt(M_MMAP_THRESHOLD)``, which also stops the adjustment) gives every such
tensor its own mapping, freed when the tensor is: one forward and backward pass of the
student's layers at 2,048 tokens with checkpointing peaked at 3.51 GB with glibc's
default, 1.32 GB with the threshold fixed.

Both are called once, before training, by ``metrobench train`` and
``benchmarks/train_step.py`` (:func:`for_cpu_training`). Neither changes a value
computed. :func:`limit_heap_retention` is a no-op outside glibc (macOS, musl) and when
the environment already sets ``MALLOC_MMAP_THRESHOLD_`` (a user's own choice wins);
:func:`tile_cpu_lm_head` when TRL has no such tile (another release: the lock pins 1.16.0).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

#: mallopt's parameter number for the mmap threshold (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
#: Allocations from this size up get their own mapping.
THRESHOLD_BYTES = 1 << 20
#: Tokens a tile of TRL's fused LM head scores at once on a CPU (TRL's own: 4,096).
CPU_LM_HEAD_TOKENS = 512


def for_cpu_training() -> None:
    """Both settings, before a training starts (the heap's applies to a CPU and a CUDA run alike)."""
    limit_heap_retention()
    tile_cpu_lm_head()


def tile_cpu_lm_head(tokens: int = CPU_LM_HEAD_TOKENS) -> bool:
    """TRL's fused LM head in tiles of ``tokens`` tokens when torch sees no CUDA device; whether it was set."""
    import torch

    if torch.cuda.is_available():
        return False
    try:
        from trl.kernels import chunked_logprob
    except ImportError:
        return False
    if not isinstance(getattr(chunked_logprob, "TOKEN_CHUNK_SIZE", None), int):
        return False
    chunked_logprob.TOKEN_CHUNK_SIZE = min(tokens, chunked_logprob.TOKEN_CHUNK_SIZE)
    return True


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
