"""A GGUF at another depth: its blocks cut or repeated, everything else copied byte for byte.

:func:`with_blocks` writes a copy of a GGUF of ``m`` blocks that has ``n``: block
``i`` of the copy is block ``i % m`` of the original (its tensors renamed, their
types and bytes unchanged), so ``n < m`` keeps the first ``n`` blocks and ``n > m``
repeats the whole stack (a Qwen3.5 of 4 blocks, three gated-delta and one attention,
becomes one of 8 or 64 with the same 3:1 pattern). ``<arch>.block_count`` becomes
``n`` and every metadata array of the architecture holding one entry a block (a
hybrid's recurrent-layer flags, per-block head counts: :data:`PER_BLOCK`) is cut or
repeated the same way. Everything outside the blocks (the tokenizer, the other keys,
the token embedding, output norm and head) is copied unchanged, so models measured
at two depths differ only in their number of blocks. Why: the project's chain
(convert, quantise) runs once, at the smallest depth that has every kind of block,
and the deeper files cost only their bytes on disk.

Why not the ``gguf`` package's reader and writer: the reader builds a numpy view of
each of a Qwen3.5 vocabulary's 248,320 tokens (15 s a file); this walks the header
once, skipping strings by their length, and copies the tensor data with
``os.copy_file_range``. GGUF versions 2 and 3, little-endian. A file that is not one,
or that asks for more blocks than it has, is one ``metrobench: error:`` line naming it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from metrobench.atomic import atomic_path
from metrobench.errors import MetrobenchError

#: GGUF value types of fixed width -> struct format (8: string, 9: array).
FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
#: Keys (after ``<arch>.``) llama.cpp reads as one entry a block when they are arrays.
PER_BLOCK = ("attention.recurrent_layers", "attention.head_count", "attention.head_count_kv", "feed_forward_length",
             "expert_feed_forward_length", "attention.sliding_window_pattern")
DEFAULT_ALIGNMENT = 32
COPY_CHUNK = 1 << 26
MAX_BLOCKS = 4096


@dataclass
class _Entry:
    key: str
    raw: bytes               # the whole entry (key, type, value) as in the file
    kind: int
    value: object            # a number, a string, or for arrays (item type, count, raw item bytes or None)


@dataclass
class _Tensor:
    name: str
    dims: list[int]
    ggml_type: int
    offset: int
    extent: int = 0          # bytes to the next tensor (alignment padding included)


class _In:
    def __init__(self, handle: BinaryIO, path: Path) -> None:
        self.handle, self.path = handle, path

    def take(self, fmt: str) -> object:
        size = struct.calcsize("<" + fmt)
        data = self.handle.read(size)
        if len(data) != size:
            raise MetrobenchError(f"{self.path}: GGUF header ends early (truncated file)")
        return struct.unpack("<" + fmt, data)[0]

    def string(self) -> str:
        length = int(self.take("Q"))
        data = self.handle.read(length)
        if len(data) != length:
            raise MetrobenchError(f"{self.path}: GGUF header ends early (truncated file)")
        return data.decode("utf-8", errors="replace")

    def value(self, kind: int) -> object:
        if kind in FIXED:
            return self.take(FIXED[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, count = int(self.take("I")), int(self.take("Q"))
            if item == STRING:
                for _ in range(count):
                    self.handle.seek(int(self.take("Q")), 1)
                return (item, count, None)
            if item not in FIXED:
                raise MetrobenchError(f"{self.path}: GGUF array of value type {item}")
            return (item, count, self.handle.read(count * struct.calcsize("<" + FIXED[item])))
        raise MetrobenchError(f"{self.path}: GGUF value type {kind}")


def _read(path: Path) -> tuple[int, list[_Entry], list[_Tensor], int, int]:
    """Version, metadata entries, tensors, alignment and where the tensor data starts."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        r = _In(handle, path)
        if handle.read(4) != b"GGUF":
            raise MetrobenchError(f"{path}: not a GGUF file")
        version = int(r.take("I"))
        if version not in (2, 3):
            raise MetrobenchError(f"{path}: GGUF version {version} (2 and 3 are read)")
        n_tensors, n_kv = int(r.take("Q")), int(r.take("Q"))
        entries = []
        for _ in range(n_kv):
            start = handle.tell()
            key = r.string()
            kind = int(r.take("I"))
            value = r.value(kind)
            end = handle.tell()
            handle.seek(start)
            entries.append(_Entry(key, handle.read(end - start), kind, value))
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            dims = [int(r.take("Q")) for _ in range(int(r.take("I")))]
            tensors.append(_Tensor(name, dims, int(r.take("I")), int(r.take("Q"))))
        alignment = next((int(e.value) for e in entries if e.key == "general.alignment"), DEFAULT_ALIGNMENT)
        data_start = -(-handle.tell() // alignment) * alignment
    ordered = sorted(tensors, key=lambda t: t.offset)
    for this, after in zip(ordered, ordered[1:] + [None]):
        this.extent = (after.offset if after else size - data_start) - this.offset
    return version, entries, tensors, alignment, data_start


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _entry(key: str, kind: int, value: object) -> bytes:
    out = _string(key) + struct.pack("<I", kind)
    if kind == ARRAY:
        item, count, raw = value  # type: ignore[misc]
        return out + struct.pack("<IQ", item, count) + raw
    return out + struct.pack("<" + FIXED[kind], value)


def block_of(name: str) -> int | None:
    """The block a tensor belongs to (``blk.12.attn_q.weight`` -> 12), else None."""
    parts = name.split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit() else None


def _copy(source: int, target: int, offset: int, count: int) -> None:
    """``count`` bytes of the file ``source`` from ``offset`` appended at ``target``'s position (descriptors)."""
    done = 0
    while done < count:
        try:
            moved = os.copy_file_range(source, target, count - done, offset + done)
        except (AttributeError, OSError):       # no copy_file_range here (or across these file systems)
            chunk = os.pread(source, min(COPY_CHUNK, count - done), offset + done)
            moved = os.write(target, chunk) if chunk else 0
        if moved <= 0:
            raise MetrobenchError("tensor data ends early (truncated file)")
        done += moved


def with_blocks(src: Path | str, dest: Path | str, blocks: int) -> Path:
    """Write ``dest``: ``src`` with ``blocks`` blocks, block ``i`` being ``src``'s block ``i % m`` (module
    docstring)."""
    src, dest = Path(src), Path(dest)
    version, entries, tensors, alignment, data_start = _read(src)
    arch = next((e.value for e in entries if e.key == "general.architecture"), None)
    count_key = f"{arch}.block_count"
    total = next((e.value for e in entries if e.key == count_key), None)
    if not isinstance(arch, str) or not isinstance(total, int):
        raise MetrobenchError(f"{src}: no general.architecture or {count_key} in its header")
    if not 0 < blocks <= MAX_BLOCKS or total <= 0:
        raise MetrobenchError(f"{src}: {blocks} blocks asked of a file of {total}")
    metadata = []
    for entry in entries:
        if entry.key == count_key:
            metadata.append(_entry(entry.key, entry.kind, blocks))
        elif entry.kind == ARRAY and entry.key.removeprefix(f"{arch}.") in PER_BLOCK and entry.value[1] == total \
                and entry.value[2] is not None:
            item, _, raw = entry.value
            width = struct.calcsize("<" + FIXED[item])
            values = b"".join(raw[(i % total) * width:(i % total + 1) * width] for i in range(blocks))
            metadata.append(_entry(entry.key, ARRAY, (item, blocks, values)))
        else:
            metadata.append(entry.raw)
    by_block: dict[int, list[_Tensor]] = {}
    outside = []
    for tensor in tensors:
        block = block_of(tensor.name)
        (by_block.setdefault(block, []) if block is not None else outside).append(tensor)
    if sorted(by_block) != list(range(total)):
        raise MetrobenchError(f"{src}: its tensors are not of blocks 0-{total - 1}")
    kept: list[tuple[str, _Tensor]] = []
    for tensor in outside:
        kept.append((tensor.name, tensor))
    for block in range(blocks):
        for tensor in by_block[block % total]:
            kept.append((f"blk.{block}.{tensor.name.split('.', 2)[2]}", tensor))
    infos, offset = [], 0
    for name, tensor in kept:
        dims = struct.pack(f"<I{len(tensor.dims)}Q", len(tensor.dims), *tensor.dims)
        infos.append(_string(name) + dims + struct.pack("<IQ", tensor.ggml_type, offset))
        offset += -(-tensor.extent // alignment) * alignment
    header = b"GGUF" + struct.pack("<IQQ", version, len(kept), len(metadata)) + b"".join(metadata) + b"".join(infos)
    header += b"\0" * (-len(header) % alignment)
    with atomic_path(dest) as tmp, open(src, "rb", buffering=0) as source, open(tmp, "wb", buffering=0) as target:
        target.write(header)
        for _, tensor in kept:
            try:
                _copy(source.fileno(), target.fileno(), data_start + tensor.offset, tensor.extent)
            except MetrobenchError as exc:
                raise MetrobenchError(f"{src}: tensor {tensor.name}: {exc}") from None
            target.write(b"\0" * (-tensor.extent % alignment))
    return dest
