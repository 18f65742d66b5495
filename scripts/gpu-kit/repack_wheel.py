"""bitsandbytes' wheel with only the native libraries one machine needs, byte for byte reproducible.

    python scripts/gpu-kit/repack_wheel.py WHEEL OUT_DIR --keep cpu --keep cuda130

PyPI's bitsandbytes wheel carries a ``libbitsandbytes_<backend>.so`` for every CUDA,
ROCm and XPU release it supports (43 MB packed); the GPU kit needs the CPU one (the
rehearsal, and bitsandbytes' fallback) and the one matching the GPU image's torch
(CUDA 13.0: ``cuda130``). Every other file is kept as it is. The output has the same
file name, a ``RECORD`` listing exactly what it holds, its entries sorted (``RECORD``
last, as wheels put it), every timestamp 1980-01-01 and fixed permissions, so two
builds from the same wheel are the same bytes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

EPOCH = (1980, 1, 1, 0, 0, 0)
LIBRARY = re.compile(r"(^|/)lib[a-z_]+?_(?P<backend>(cpu|cuda|rocm|xpu|mps|hip)[0-9a-z]*)\.(so|dylib|dll)$")


def dropped(name: str, keep: set[str]) -> bool:
    """Whether ``name`` is a native backend library not in ``keep``."""
    match = LIBRARY.search(name)
    return bool(match) and match.group("backend") not in keep


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def repack(wheel: Path, out_dir: Path, keep: set[str]) -> tuple[Path, list[str]]:
    """Write the trimmed wheel into ``out_dir``; returns its path and the names dropped."""
    with zipfile.ZipFile(wheel) as source:
        contents = {info.filename: source.read(info) for info in source.infolist() if not info.is_dir()}
    records = [name for name in contents if name.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise SystemExit(f"{wheel}: not a wheel ({len(records)} RECORD files)")
    record = records[0]
    gone = sorted(name for name in contents if dropped(name, keep))
    kept = sorted(name for name in contents if name not in gone and name != record)
    lines = [_record_line(name, contents[name]) for name in kept] + [f"{record},,"]
    contents[record] = ("\n".join(lines) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / wheel.name
    with zipfile.ZipFile(out, "w") as target:
        for name in [*kept, record]:
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3                                   # unix permissions below
            mode = 0o755 if name.endswith((".so", ".dylib")) else 0o644
            info.external_attr = (0o100000 | mode) << 16
            target.writestr(info, contents[name], compresslevel=9)
    return out, gone


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--keep", action="append", required=True,
                        help="a backend whose library stays (cpu, cuda130, ...); repeat")
    args = parser.parse_args(argv)
    out, gone = repack(args.wheel, args.out_dir, set(args.keep))
    print(f"{out.name}: kept {', '.join(sorted(args.keep))}; dropped {len(gone)} libraries "
          f"({args.wheel.stat().st_size / 2**20:.1f} -> {out.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
