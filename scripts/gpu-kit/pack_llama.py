"""The llama.cpp tree the GPU kit carries: what builds llama-server and llama-quantize for CUDA, and the converter.

    python scripts/gpu-kit/pack_llama.py TREE OUT.tar.xz

``TREE`` is the llama.cpp the project's own server was built from (the tree vendored in
the pinned llama-cpp-python sdist: ``metrobench.agents.serving.llama_build_info()``), so
the GPU machine serves with the same llama.cpp as this one and converts with the same
``convert_hf_to_gguf.py``. Kept (:func:`kept`): the top-level CMake files and licence;
``cmake/``, ``include/``, ``src/``, ``common/``, ``vendor/``; ggml's core with only its
CPU and CUDA backends; ``tools/`` without the web UI's sources and the server's tests;
and the converter (``convert_hf_to_gguf.py``, ``conversion/``, ``gguf-py/``). Left
out: the other GPU backends, tests, examples, docs, the vocabulary GGUFs under
``models/``. The archive is the same bytes for the same tree (entries sorted, owner 0,
time 0, xz preset 9), and the tree's ``metrobench-source.json`` records where it came
from and the commit llama.cpp was built at when that is known.
"""

from __future__ import annotations

import io
import json
import lzma
import subprocess
import sys
import tarfile
from pathlib import Path

WHOLE = ("cmake", "include", "src", "common", "vendor", "conversion", "gguf-py", "licenses", "ggml/cmake",
         "ggml/include", "ggml/src/ggml-cpu", "ggml/src/ggml-cuda", "tools")
FILES = ("CMakeLists.txt", "LICENSE", "convert_hf_to_gguf.py", "ggml/CMakeLists.txt", "scripts/ui-assets.cmake")
#: Under ``tools/``: what the build never reads with the web UI off, and the server's tests.
TOOLS_SKIPPED = ("tools/server/tests/", "tools/server/bench/", "tools/ui/")
TOOLS_UI = ("tools/ui/CMakeLists.txt", "tools/ui/sources.cmake", "tools/ui/ui.cpp.in", "tools/ui/ui.h.in")
SKIPPED_PARTS = ("__pycache__", ".git")
PREFIX = "llama.cpp"


def kept(rel: str) -> bool:
    """Whether the file at ``rel`` (a path relative to the tree, with ``/``) goes into the archive."""
    parts = rel.split("/")
    if any(p in SKIPPED_PARTS for p in parts) or rel.endswith((".pyc", ".gguf")):
        return False
    if rel in FILES or rel in TOOLS_UI:
        return True
    if rel.startswith(TOOLS_SKIPPED):
        return False
    if rel.startswith("ggml/src/") and len(parts) == 3:         # ggml's core: the files directly in src/
        return True
    return any(rel == w or rel.startswith(w + "/") for w in WHOLE)


def pack(tree: Path, out: Path, source: dict) -> tuple[int, int]:
    """Write the archive; returns (files, bytes of the archive)."""
    names = sorted(str(p.relative_to(tree)).replace("\\", "/") for p in tree.rglob("*") if p.is_file())
    chosen = [n for n in names if kept(n)]
    for needed in ("CMakeLists.txt", "ggml/src/ggml-cuda/CMakeLists.txt", "tools/server/CMakeLists.txt",
                   "tools/quantize/CMakeLists.txt", "convert_hf_to_gguf.py"):
        if needed not in chosen:
            raise SystemExit(f"pack_llama: error: {tree}: no {needed} (not a llama.cpp tree of this layout)")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        record = (json.dumps(source, indent=2, sort_keys=True) + "\n").encode()
        for name, data in [(n, None) for n in chosen] + [("metrobench-source.json", record)]:
            path = tree / name if data is None else None
            info = tarfile.TarInfo(f"{PREFIX}/{name}")
            content = path.read_bytes() if path is not None else data
            info.size, info.mtime, info.uid, info.gid, info.uname, info.gname = len(content), 0, 0, 0, "", ""
            info.mode = 0o755 if path is not None and path.stat().st_mode & 0o111 else 0o644
            tar.addfile(info, io.BytesIO(content))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    tmp.write_bytes(lzma.compress(buffer.getvalue(), preset=9))
    tmp.replace(out)
    return len(chosen), out.stat().st_size


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: pack_llama.py TREE OUT.tar.xz", file=sys.stderr)
        return 2
    tree, out = Path(argv[0]).resolve(), Path(argv[1])
    source: dict = {"tree": str(tree)}
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    if commit.returncode == 0 and (tree / ".git").exists():
        source["commit"] = commit.stdout.strip()
    info = tree.parent.parent / "PKG-INFO"                  # llama-cpp-python's sdist: .../vendor/llama.cpp
    if info.is_file():
        version = next((ln.split(":", 1)[1].strip() for ln in info.read_text().splitlines()
                        if ln.startswith("Version:")), None)
        source["llama_cpp_python"] = version
    files, size = pack(tree, out, source)
    print(f"llama.cpp tree: {files} files from {tree} -> {out} ({size / 2**20:.2f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
