"""CPU training's heap: freed activations go back to the system (metrobench/training/host_memory.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: In a fresh process: free one 4 MiB block, then ask for another and report whether glibc
#: served it with its own mapping (mallinfo2's hblkhd: bytes in mmapped blocks).
PROBE = r"""
import ctypes, ctypes.util, sys
from metrobench.training.host_memory import limit_heap_retention
libc = ctypes.CDLL(ctypes.util.find_library("c"))
if not hasattr(libc, "mallinfo2"):
    print("no mallinfo2"); sys.exit(0)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
set_ = limit_heap_retention() if sys.argv[1] == "limit" else False
size = 4 << 20
libc.free(libc.malloc(size))   # glibc's default: this free raises its threshold above 4 MiB
block = libc.malloc(size)
print(set_, libc.mallinfo2().hblkhd >= size)
"""


def _probe(mode: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "no mallinfo2":
        pytest.skip("not glibc >= 2.33")
    return done.stdout.strip()


def test_a_freed_block_no_longer_raises_the_threshold_into_the_heap(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert _probe("default") == "False False"      # glibc's default: the second block comes from the heap
    assert _probe("limit") == "True True"          # fixed at 1 MiB: its own mapping, freed with it


def test_a_threshold_the_user_set_is_left_alone():
    assert _probe("limit", MALLOC_MMAP_THRESHOLD_="65536") == "False True"   # the user's 64 KiB applies


@pytest.mark.slow
def test_cpu_lm_head_tiles_are_small_and_change_no_value():
    """TRL's fused LM head on a CPU in 512-token tiles: the same log-probabilities, entropies and
    gradients, bit for bit, as in TRL's own 4,096-token tiles (each token's row is computed alone)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device: TRL's tiles are kept")
    from trl.kernels import chunked_logprob
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    from metrobench.training.host_memory import CPU_LM_HEAD_TOKENS, tile_cpu_lm_head

    def run() -> list:
        generator = torch.Generator().manual_seed(0)
        hidden = torch.randn(5000, 16, generator=generator).requires_grad_(True)
        weight = torch.randn(33000, 16, generator=generator) * 0.3
        labels = torch.randint(0, 33000, (5000,), generator=generator)
        log_probs, entropy, *_ = chunked_logprob.ChunkedLogProbFunction.apply(
            hidden, weight, None, labels, 1.0, _CHUNKED_LOGPROB_CHUNK_SIZE, None, 1.0, ("log_probs", "entropy"))
        (-log_probs.mean()).backward()
        return [log_probs.detach(), entropy.detach(), hidden.grad]

    original = chunked_logprob.TOKEN_CHUNK_SIZE   # (4,096 in TRL 1.16.0, unless a train command ran here)
    try:
        chunked_logprob.TOKEN_CHUNK_SIZE = 4096
        before = run()
        assert tile_cpu_lm_head() and chunked_logprob.TOKEN_CHUNK_SIZE == CPU_LM_HEAD_TOKENS == 512
        after = run()
    finally:
        chunked_logprob.TOKEN_CHUNK_SIZE = original
    assert all(torch.equal(a, b) for a, b in zip(before, after))
