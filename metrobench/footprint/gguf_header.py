"""A GGUF file's header: its metadata and where its tensors lie, read without loading the file.

Contract: :func:`read_gguf_header` returns the key/value metadata (scalars as Python values,
numeric arrays as lists, string arrays as :class:`Strings`: their count only, since a
tokenizer's 248,320 tokens are not needed) and each tensor's bytes in the file (from
the offsets: the distance to the next tensor, the last one to the end of the file, so
alignment padding is included). Why not the ``gguf`` package's reader: it decodes every
token of the vocabulary and builds views of every tensor, seconds a file, and the workflow
reads every served file's header at each start (:mod:`metrobench.footprint.fit`); this
reads only the metadata (a few MB at most), and needs no optional package.

The reader is bounded, because the file may be anything a download or a user left under
the GGUF's name (an HTML error page, a truncated transfer, a corrupt copy): every length
is checked against the bytes left in the file before it is read or skipped, every count
against a ceiling (:data:`MAX_ENTRIES`, :data:`MAX_TENSORS`, :data:`MAX_ARRAY`, ...), the
alignment is a power of two, each tensor's dimensions, type and offset are in range, and
the tensors' data must lie inside the file (a truncated file is refused, never estimated
from its size). Any failure raises :class:`GgufError`: one line naming the file and the
field, which the fit check reports as the row's error.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from metrobench.errors import MetrobenchError

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
#: GGUF value types -> struct format (8: string, 9: array are read apart).
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
#: Ceilings on the header's counts, far above any released model's (a 671B MoE has ~1,100
#: tensors and ~50 keys; a vocabulary ~260k tokens) and far below what would hang the reader.
MAX_ENTRIES = 1 << 16
MAX_TENSORS = 1 << 20
MAX_ARRAY = 1 << 24
MAX_KEY = 1 << 16
MAX_DIMS = 4                       # GGML_MAX_DIMS
MAX_ELEMENTS = 1 << 62
#: ggml tensor types -> (elements a block, bytes a block), as ggml.c and the ``gguf`` package's
#: GGML_QUANT_SIZES give them: what a tensor's extent in the file is checked with. A type not
#: here (newer than this table) is only held to its offset lying inside the file.
GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
               9: (32, 40), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
               15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
               21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8),
               28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17),
               40: (64, 36), 41: (128, 18)}
MAX_GGML_TYPE = 1 << 10


class GgufError(MetrobenchError, ValueError):
    """A file that is not a readable GGUF: the message names the file and the field."""


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


def _gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 10**7 else f"{size:,} bytes"


class _Reader:
    """Reads a GGUF header with every length held to the bytes left in the file."""

    def __init__(self, handle: BinaryIO, path: Path, size: int) -> None:
        self.handle, self.path, self.size = handle, path, size

    def fail(self, field: str, problem: str) -> GgufError:
        return GgufError(f"{self.path}: GGUF header, {field}: {problem}")

    @property
    def left(self) -> int:
        return self.size - self.handle.tell()

    def need(self, nbytes: int, field: str) -> None:
        if nbytes > self.left:
            raise self.fail(field, f"{nbytes:,} bytes needed at offset {self.handle.tell():,}, past the end of "
                                   f"the file ({self.size:,} bytes): truncated or corrupt")

    def read(self, fmt: str, field: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size, field)
        return struct.unpack(fmt, self.handle.read(size))[0]

    def count(self, field: str, ceiling: int, each: int) -> int:
        """A u64 count, at most ``ceiling`` and at most what the bytes left can hold at ``each`` apiece."""
        value = self.read("<Q", field)
        if value > ceiling:
            raise self.fail(field, f"count {value:,} is above {ceiling:,}: corrupt")
        self.need(value * each, field)
        return value

    def string(self, field: str, ceiling: int | None = None, strict: bool = False) -> str:
        length = self.read("<Q", field)
        if ceiling is not None and length > ceiling:
            raise self.fail(field, f"a string of {length:,} bytes (at most {ceiling:,}): corrupt")
        self.need(length, field)
        data = self.handle.read(length)
        try:
            return data.decode("utf-8", errors="strict" if strict else "replace")
        except UnicodeDecodeError:
            raise self.fail(field, "a name that is not UTF-8: corrupt") from None

    def skip_strings(self, count: int, field: str) -> None:
        for i in range(count):
            length = self.read("<Q", f"{field}[{i}]")
            self.need(length, f"{field}[{i}]")
            self.handle.seek(length, 1)

    def value(self, kind: int, field: str) -> Any:
        if kind in SCALARS:
            return self.read(SCALARS[kind], field)
        if kind == STRING:
            return self.string(field)
        if kind == ARRAY:
            item = self.read("<I", field)
            if item == STRING:
                count = self.count(field, MAX_ARRAY, 8)
                self.skip_strings(count, field)
                return Strings(count)
            if item not in SCALARS:
                raise self.fail(field, f"an array of value type {item} (not a number or a string)")
            fmt = SCALARS[item]
            width = struct.calcsize(fmt)
            count = self.count(field, MAX_ARRAY, width)
            return list(struct.unpack(f"<{count}{fmt[1:]}", self.handle.read(width * count)))
        raise self.fail(field, f"value type {kind} (GGUF types are 0-12)")


def _not_gguf(path: Path, start: bytes) -> GgufError:
    shown = start.decode("latin-1").encode("unicode_escape").decode("ascii")
    hint = " (an HTML page saved under the GGUF's name?)" if start.lstrip()[:1] == b"<" else ""
    return GgufError(f"{path}: not a GGUF file: it starts with '{shown}', not 'GGUF'{hint}")


def read_gguf_header(path: Path | str) -> Header:
    """The metadata and tensor sizes of a GGUF (see the module docstring); :class:`GgufError` when the
    file is not a GGUF of version 2 or 3 whose header and tensor data lie inside it."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            return _read(_Reader(handle, path, size))
    except OSError as exc:
        raise GgufError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _read(r: _Reader) -> Header:
    path = r.path
    start = r.handle.read(4)
    if start != MAGIC:
        raise _not_gguf(path, start)
    version = r.read("<I", "version")
    if version not in (2, 3):
        raise r.fail("version", f"{version} (this reader knows GGUF versions 2 and 3)")
    tensors = r.count("tensor count", MAX_TENSORS, 8 + 4 + 8 + 4 + 8)
    entries = r.count("metadata count", MAX_ENTRIES, 8 + 4 + 1)
    metadata: dict[str, Any] = {}
    for i in range(entries):
        key = r.string(f"metadata key {i}", MAX_KEY, strict=True)
        if key in metadata:
            raise r.fail(key, "the key appears twice")
        metadata[key] = r.value(r.read("<I", key), key)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        raise r.fail("general.alignment", f"{alignment!r} (a power of two is required)")
    infos: list[tuple[int, str, int | None]] = []
    parameters = 0
    names: set[str] = set()
    for i in range(tensors):
        name = r.string(f"tensor {i} name", MAX_KEY, strict=True)
        field = f"tensor {name}"
        if name in names:
            raise r.fail(field, "the name appears twice")
        names.add(name)
        n_dims = r.read("<I", field)
        if not 1 <= n_dims <= MAX_DIMS:
            raise r.fail(field, f"{n_dims} dimensions (1-{MAX_DIMS})")
        dims = [r.read("<Q", field) for _ in range(n_dims)]
        elements = 1
        for dim in dims:
            elements *= dim
        if elements > MAX_ELEMENTS:
            raise r.fail(field, f"dimensions {dims}: too many elements, corrupt")
        ggml_type = r.read("<I", field)
        if ggml_type >= MAX_GGML_TYPE:
            raise r.fail(field, f"ggml type {ggml_type}: corrupt")
        offset = r.read("<Q", field)
        if offset % alignment:
            raise r.fail(field, f"offset {offset:,} is not a multiple of the alignment {alignment}")
        block = GGML_BLOCKS.get(ggml_type)
        nbytes = None
        if block is not None:
            if dims[0] % block[0]:
                raise r.fail(field, f"{dims[0]:,} elements a row is not a multiple of its type's block of {block[0]}")
            nbytes = elements // block[0] * block[1]
        infos.append((offset, name, nbytes))
        parameters += elements
    data_start = -(-r.handle.tell() // alignment) * alignment
    end = r.size - data_start
    for offset, name, nbytes in infos:
        extent = offset + (nbytes if nbytes is not None else 1)
        if nbytes != 0 and extent > end:
            raise r.fail(f"tensor {name}", f"its data ends at byte {data_start + extent:,} but the file has "
                                           f"{_gb(r.size)} ({r.size:,} bytes): truncated (an interrupted "
                                           f"download? fetch it again)")
    infos.sort()
    sizes = {name: (infos[i + 1][0] if i + 1 < len(infos) else end) - offset
             for i, (offset, name, _) in enumerate(infos)}
    return Header(metadata, sizes, parameters)
