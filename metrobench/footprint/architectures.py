"""The widths a serving estimate needs, per architecture: from the GGUF's header, else a table.

Contract: :func:`arch_of` returns an :class:`Arch` for a served file: its header's
metadata when the file is present (:mod:`.gguf_header`; block count,
KV heads and head sizes, the full-attention interval of a hybrid, the recurrent state
sizes, vocabulary, widths, and the exact bytes of the token embedding llama.cpp keeps on
the host), else the first :data:`TABLE` entry whose pattern matches the file's name
(``Qwen3.5-27B-Q4_K_M.gguf`` -> ``qwen3.5-27b*``), else None (unknown: never guessed).

The table: Qwen3.5-27B's widths are its released config.json's (the same as
``benchmarks/merge_memory.py``); Llama 3.1-8B's are Meta's published ones; the others are
inferred from their family and parameter count and marked ``provisional`` (a plan shows
them with ``~``). Qwen3.6-27B and Qwen3.8-27B are served as Qwen3.5-27B's shape. A
present file's header always wins over the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path

#: Bits a weight of each llama.cpp file type, as llama-quantize reports them for a 7-8B
#: model (the mix of block types K-quants use): what a file's size is estimated from when
#: neither the file nor its lock entry is here.
BITS_PER_WEIGHT = {"F32": 32.0, "F16": 16.0, "BF16": 16.0, "Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.69,
                   "Q5_K_S": 5.54, "Q4_K_M": 4.89, "Q4_K_S": 4.58, "Q4_0": 4.55, "Q3_K_M": 3.91,
                   "IQ4_XS": 4.25}
#: llama.cpp's hybrid architectures whose GGUF may leave the interval out (it then takes 4).
HYBRIDS = ("qwen35", "qwen35moe", "qwen3next")
HYBRID_INTERVAL = 4
QUANT = re.compile(r"(?i)(?:^|[-_.])(BF16|F16|F32|Q8_0|Q6_K|Q5_K_[MS]|Q4_K_[MS]|Q4_0|Q3_K_M|IQ4_XS)\.gguf$")


@dataclass(frozen=True)
class Arch:
    """One architecture's serving widths (``None``: the part does not apply)."""

    name: str
    params_b: float                  # parameters in billions (all experts of a MoE)
    layers: int                      # transformer blocks
    kv_layers: int                   # blocks with attention (a KV cache); the rest are recurrent
    kv_heads: int
    key_length: int                  # head size of K
    value_length: int                # head size of V (0: V is a view of K, as in MLA)
    hidden: int                      # embedding width
    vocab: int
    ffn: int                         # feed-forward width one token passes (MoE: the experts used)
    swa_layers: int = 0              # of kv_layers, those with a sliding window
    swa_window: int = 0
    conv_kernel: int = 0             # gated-delta / SSM layers: the short convolution's width
    conv_channels: int = 0           # the channels it convolves
    state_floats: int = 0            # the recurrent state of one layer and one sequence, in floats
    host_bytes: int | None = None    # bytes of weights kept on the host (the token embedding), read
    provisional: bool = False        # widths inferred, not read from a released config or header
    source: str = "table"            # "table" or the GGUF's path

    @property
    def recurrent_layers(self) -> int:
        return self.layers - self.kv_layers


def _qwen35(name: str, params_b: float, layers: int, hidden: int, kv_heads: int, k_heads: int, v_heads: int,
            ffn: int, provisional: bool = True) -> Arch:
    """A Qwen3.5 hybrid: every 4th block full attention (head 256), the rest gated-delta (heads of 128)."""
    return Arch(name, params_b, layers, layers // 4, kv_heads, 256, 256, hidden, 248_320, ffn,
                conv_kernel=4, conv_channels=2 * k_heads * 128 + v_heads * 128, state_floats=v_heads * 128 * 128,
                provisional=provisional)


_QWEN35_27B = _qwen35("qwen3.5-27b", 26.9, 64, 5120, 4, 16, 48, 17408, provisional=False)

#: (file-name pattern, architecture), the first match counts; patterns are lower case.
TABLE: list[tuple[str, Arch]] = [
    ("qwen3.5-0.8b*", _qwen35("qwen3.5-0.8b", 0.8, 24, 1024, 2, 16, 16, 3584)),
    ("qwen3.5-2b*", _qwen35("qwen3.5-2b", 2.0, 24, 2048, 2, 16, 16, 6144)),
    ("qwen3.5-4b*", _qwen35("qwen3.5-4b", 4.2, 32, 2560, 4, 16, 32, 9216)),
    ("qwen3.5-9b*", _qwen35("qwen3.5-9b", 9.0, 32, 4096, 4, 16, 32, 12288)),
    ("qwen3.5-27b*", _QWEN35_27B),
    ("qwen3.6-27b*", replace(_QWEN35_27B, name="qwen3.6-27b")),
    ("qwen3.8-27b*", replace(_QWEN35_27B, name="qwen3.8-27b")),
    # MoE: 256 experts of 512, 8 used and one shared (the Qwen3-Next shape at 40 blocks)
    ("qwen3.5-35b-a3b*", _qwen35("qwen3.5-35b-a3b", 35.0, 40, 2048, 2, 16, 32, 9 * 512)),
    # GLM-4.7-Flash: DeepSeek-style MLA (llama.cpp caches the 512 + 64 latent only), 47 blocks
    ("glm-4.7-flash*", Arch("glm-4.7-flash", 30.0, 47, 47, 1, 576, 0, 2048, 154_880, 5 * 1536,
                            provisional=True)),
    ("llama-3.1-8b*", Arch("llama-3.1-8b", 8.03, 32, 32, 8, 128, 128, 4096, 128_256, 14336)),
    # Gemma 4: local (sliding-window 512/1024) blocks five to one global, 262,144-token vocabulary
    ("gemma-4-e2b*", Arch("gemma-4-e2b", 5.1, 35, 35, 1, 256, 256, 1536, 262_144, 6144, swa_layers=28,
                          swa_window=512, provisional=True)),
    ("gemma-4-e4b*", Arch("gemma-4-e4b", 8.0, 42, 42, 2, 256, 256, 2560, 262_144, 10240, swa_layers=35,
                          swa_window=512, provisional=True)),
    ("gemma-4-26b-a4b*", Arch("gemma-4-26b-a4b", 25.2, 30, 30, 8, 256, 256, 2816, 262_144, 9 * 704,
                              swa_layers=25, swa_window=1024, provisional=True)),
    # Muse Glimmer 30B: nothing published beyond its size; a dense GQA model of Llama's shape
    ("muse-glimmer-30b*", Arch("muse-glimmer-30b", 30.0, 48, 48, 8, 128, 128, 6144, 128_256, 16384,
                               provisional=True)),
]


def quant_of(path: str | Path) -> str | None:
    """The file type a GGUF's name states (``...-Q4_K_M.gguf`` -> ``Q4_K_M``), upper case."""
    match = QUANT.search(Path(path).name)
    return match.group(1).upper() if match else None


def table_arch(name: str) -> Arch | None:
    """The table's entry for a file or model name (case-insensitive), else None."""
    key = Path(name).name.lower()
    return next((arch for pattern, arch in TABLE if fnmatchcase(key, pattern)), None)


def arch_of(path: str | Path) -> Arch | None:
    """A served file's architecture: its header when the file is here (a file that does not read as a
    GGUF raises :class:`~metrobench.footprint.gguf_header.GgufError`: never the table's guess for a
    file that is there but broken), else the table's entry for its name."""
    if Path(path).is_file():
        return header_arch(Path(path))
    return table_arch(str(path))


#: Ranges of the header's counts and widths (inclusive): far beyond any released model, and
#: small enough that nothing computed from them loops for long or overflows an estimate.
MAX_BLOCKS = 4096
RANGES = {"block_count": (1, MAX_BLOCKS), "attention.head_count": (0, 1 << 16),
          "attention.head_count_kv": (0, 1 << 16), "attention.key_length": (0, 1 << 16),
          "attention.key_length_mla": (0, 1 << 16), "attention.value_length": (0, 1 << 16),
          "embedding_length": (1, 1 << 20), "feed_forward_length": (0, 1 << 22),
          "expert_feed_forward_length": (0, 1 << 22), "expert_used_count": (0, 1 << 12),
          "vocab_size": (1, 1 << 24), "full_attention_interval": (1, MAX_BLOCKS),
          "nextn_predict_layers": (0, MAX_BLOCKS), "attention.sliding_window": (0, 1 << 24),
          "ssm.inner_size": (0, 1 << 20), "ssm.state_size": (0, 1 << 16), "ssm.group_count": (0, 1 << 12),
          "ssm.conv_kernel": (0, 1 << 10)}
#: Keys llama.cpp accepts per block (an array with one entry a block) as well as one number.
PER_BLOCK = {"attention.head_count", "attention.head_count_kv", "feed_forward_length",
             "expert_feed_forward_length", "attention.recurrent_layers"}


class _Meta:
    """A header's metadata under one architecture's prefix, each value checked for its type and range."""

    def __init__(self, path: Path, meta: dict, arch: str) -> None:
        self.path, self.meta, self.arch = path, meta, arch

    def fail(self, key: str, problem: str) -> Exception:
        from metrobench.footprint.gguf_header import GgufError

        return GgufError(f"{self.path}: GGUF header, {key}: {problem}")

    def _checked(self, key: str, value: object, suffix: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"{value!r} is a {type(value).__name__}, not a whole number")
        lo, hi = RANGES.get(suffix, (0, 1 << 32))
        if not lo <= value <= hi:
            raise self.fail(key, f"{value:,} is outside {lo:,}-{hi:,}: corrupt")
        return value

    def raw(self, suffix: str) -> int | list[int] | None:
        """A count or width (an int), a per-block key's list, or None when absent."""
        key = f"{self.arch}.{suffix}"
        value = self.meta.get(key)
        if value is None:
            return None
        if isinstance(value, list):
            if suffix not in PER_BLOCK:
                raise self.fail(key, "an array where one number belongs")
            return [self._checked(key, int(v) if isinstance(v, bool) else v, suffix) for v in value]
        if suffix == "attention.recurrent_layers":
            raise self.fail(key, f"{value!r}: an array of one flag a block belongs here")
        return self._checked(key, value, suffix)

    def num(self, suffix: str) -> int | None:
        """One number: a per-block list's largest entry."""
        value = self.raw(suffix)
        if isinstance(value, list):
            return max(value, default=0)
        return value


def header_arch(path: Path) -> Arch:
    """The widths a GGUF's header states; a width the header leaves out comes from the table's entry
    for the file's name, if any. :class:`~metrobench.footprint.gguf_header.GgufError` (one line naming
    the file and the key) when it does not read, or a count or width is missing, of the wrong type or
    out of range (a negative block count, 2**40 blocks, a string where a number belongs)."""
    from metrobench.footprint.gguf_header import read_gguf_header

    header = read_gguf_header(path)
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise _Meta(path, meta, "").fail("general.architecture",
                                         "missing" if arch is None else f"{arch!r} is not a name")
    m = _Meta(path, meta, arch)
    layers = m.num("block_count")
    if layers is None:
        raise m.fail(f"{arch}.block_count", "missing: the number of blocks is needed for the estimate")
    fallback = table_arch(path.name)
    kv_counts = m.raw("attention.head_count_kv")
    per_layer = kv_counts if isinstance(kv_counts, list) else None
    recurrent = m.raw("attention.recurrent_layers")
    interval = m.num("full_attention_interval") or (HYBRID_INTERVAL if arch in HYBRIDS else None)
    predict = m.num("nextn_predict_layers") or 0   # MTP blocks: attention, never recurrent
    if predict > layers:
        raise m.fail(f"{arch}.nextn_predict_layers", f"{predict} is more than the {layers} blocks: corrupt")
    if isinstance(recurrent, list):
        kv_layers = layers - sum(1 for flag in recurrent[:layers] if flag)
    elif per_layer is not None:
        kv_layers = sum(1 for n in per_layer[:layers] if n > 0)
    elif interval:   # as llama.cpp marks them (src/models/qwen35.cpp): block i is attention when (i+1) % interval == 0
        kv_layers = (layers - predict) // interval + predict
    elif m.num("ssm.state_size") is not None:  # a pure recurrent model
        kv_layers = 0
    else:
        kv_layers = layers
    heads = m.num("attention.head_count_kv")
    heads = heads if heads is not None else (fallback.kv_heads if fallback else 0)
    key_length = m.num("attention.key_length") or m.num("attention.key_length_mla")
    hidden = m.num("embedding_length") or (fallback.hidden if fallback else 0)
    head = hidden // max(1, m.num("attention.head_count") or 1)
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = m.num("vocab_size") or (min(len(tokens), RANGES["vocab_size"][1]) if tokens is not None else 0) \
        or (fallback.vocab if fallback else 0)
    d_inner, d_state = m.num("ssm.inner_size") or 0, m.num("ssm.state_size") or 0
    groups, kernel = m.num("ssm.group_count") or 0, m.num("ssm.conv_kernel") or 0
    ffn = (m.num("expert_feed_forward_length") or 0) * (m.num("expert_used_count") or 0) \
        or (m.num("feed_forward_length") or 0)
    embedding = header.tensor_bytes.get("token_embd.weight")
    params = header.parameters / 1e9
    swa = m.num("attention.sliding_window") or 0
    return Arch(
        name=arch, params_b=params, layers=layers, kv_layers=kv_layers, kv_heads=heads,
        key_length=key_length or head, value_length=m.num("attention.value_length") or key_length or head,
        hidden=hidden, vocab=vocab, ffn=ffn,
        swa_layers=fallback.swa_layers if swa and fallback else 0, swa_window=swa,
        conv_kernel=kernel, conv_channels=d_inner + 2 * groups * d_state if kernel else 0,
        state_floats=d_state * d_inner, host_bytes=embedding,
        provisional=False, source=str(path))
