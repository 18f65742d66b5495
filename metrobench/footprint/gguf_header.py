"""A GGUF file's header: its metadata and where its tensors lie, read without loading the file.

Contract: :func:`read_header` returns the key/value metadata (scalars as Python values,
numeric arrays as lists, string arrays as :class:`Strings`: their count only, since a
tokenizer's 248,320 tokens are not needed) and each tensor's bytes in the file (from
the offsets: the distance to the next tensor, the last one to the end of the file, so
alignment padding is included). It raises :class:`ValueError` for a file that is not a
GGUF of version 2 or 3. Why not the ``gguf`` package's reader: it decodes every token of
the vocabulary and builds views of every tensor, seconds a file, and the workflow reads
every served file's header at each start (:mod:`metrobench.footprint.fit`); this reads
only the metadata (a few MB at most), and needs no optional package.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
#: GGUF value types -> struct format (8: string, 9: array are read apart).
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class Strings:
    """A string array, by its length only."""

    count: int

    def __len__(self) -> int:
        return self.count


@dataclass
class Header:
    metadata: dict[str, Any]
    tensor_bytes: dict[str, int]      # tensor name -> bytes it takes in the file
    parameters: int                   # elements of all tensors


def _read(handle: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise ValueError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _string(handle: BinaryIO) -> str:
    length = _read(handle, "<Q")
    data = handle.read(length)
    if len(data) != length:
        raise ValueError("truncated GGUF string")
    return data.decode("utf-8", errors="replace")


def _skip_string(handle: BinaryIO) -> None:
    handle.seek(_read(handle, "<Q"), 1)


def _value(handle: BinaryIO, kind: int) -> Any:
    if kind in SCALARS:
        return _read(handle, SCALARS[kind])
    if kind == STRING:
        return _string(handle)
    if kind == ARRAY:
        item, count = _read(handle, "<I"), _read(handle, "<Q")
        if item == STRING:
            for _ in range(count):
                _skip_string(handle)
            return Strings(count)
        if item not in SCALARS:
            raise ValueError(f"GGUF array of type {item}")
        fmt = SCALARS[item]
        size = struct.calcsize(fmt)
        data = handle.read(size * count)
        if len(data) != size * count:
            raise ValueError("truncated GGUF array")
        return list(struct.unpack(f"<{count}{fmt[1:]}", data))
    raise ValueError(f"GGUF value of type {kind}")


def read_header(path: Path | str) -> Header:
    """The metadata and tensor sizes of a GGUF (see the module docstring)."""
    path = Path(path)
    with open(path, "rb") as handle:
        if handle.read(4) != MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        version = _read(handle, "<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version}")
        tensors, entries = _read(handle, "<Q"), _read(handle, "<Q")
        metadata: dict[str, Any] = {}
        for _ in range(entries):
            key = _string(handle)
            metadata[key] = _value(handle, _read(handle, "<I"))
        offsets: list[tuple[int, str]] = []
        parameters = 0
        for _ in range(tensors):
            name = _string(handle)
            dims = [_read(handle, "<Q") for _ in range(_read(handle, "<I"))]
            _read(handle, "<I")                      # the ggml type: sizes come from the offsets
            offsets.append((_read(handle, "<Q"), name))
            elements = 1
            for dim in dims:
                elements *= dim
            parameters += elements
        alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        start = -(-handle.tell() // alignment) * alignment
    end = path.stat().st_size - start
    offsets.sort()
    sizes = {name: (offsets[i + 1][0] if i + 1 < len(offsets) else end) - offset
             for i, (offset, name) in enumerate(offsets)}
    return Header(metadata, sizes, parameters)
