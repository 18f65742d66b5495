#!/usr/bin/env bash
# Build llama.cpp once, portably, and install it twice over into a virtual environment:
# as the shared libraries of llama-cpp-python (the Python bindings: GGUF loading,
# quantisation, llama_cpp.server) and as the `llama-server` binary (the paper's server).
#
#   scripts/install-llama-cpp.sh VENV
#
# Both come from the llama.cpp tree vendored in the pinned llama-cpp-python sdist, so the
# bindings, the server and the GGUF converter are one llama.cpp revision.
#
# Portable by default: GGML_NATIVE=OFF with AVX/AVX2/FMA/F16C/BMI2 and no AVX-512/AMX, so the
# build runs on any x86-64 CPU with AVX2. A `-march=native` build (llama-cpp-python's own
# default) traps with SIGILL on hosts that advertise AMX or AVX-512 the OS does not enable.
# LLAMA_CMAKE_ARGS is appended to the defaults and overrides them, e.g. on an RTX 5090:
#   LLAMA_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=120" scripts/install-llama-cpp.sh .venv
# or "-DGGML_NATIVE=ON" to opt in to a build for this machine only.
#
# The build folder is keyed by the version and the CMake arguments, so a build made with
# other arguments is never reused (pip's wheel cache, keyed by the sdist alone, would).
#
# A named build, for the rows that ask for one (`serving.build: b8642` in a model row: the
# paper served its rows on b8642 and b10398): give a llama.cpp checkout at that tag and the
# name, and its llama-server and llama-quantize are built, into VENV's llama_cpp/lib/builds/NAME/
# beside the default one, with the tree's GGUF converter (convert_hf_to_gguf.py, conversion/,
# gguf-py/ in NAME/convert/), so a student served on NAME is converted and quantised by NAME
# too (metrobench/training/export.py; the bindings stay the vendored tree's):
#   LLAMA_CPP_SOURCE=~/src/llama.cpp LLAMA_CPP_BUILD=b8642 scripts/install-llama-cpp.sh .venv
# (`make builds` does this for every build the config names, cloning the tag when no checkout
# is given: metrobench/agents/llama_builds.py). Its build folder is keyed by the source tree
# and the arguments; the vendored tree itself (LLAMA_CPP_SOURCE=vendored) reuses the default
# build folder, compiling nothing twice, and is recorded as the vendored tree, not as a tag.
# METROBENCH_LLAMA_BUILDS=DIR installs named builds into DIR/NAME instead (the rehearsal's).
set -euo pipefail

VENV=${1:?usage: $0 VENV}
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
JOBS=${LLAMA_CPP_BUILD_JOBS:-$(nproc)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${LLAMA_CPP_WORK:-$ROOT/build/llama.cpp}
PY="$VENV/bin/python"

PORTABLE=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
          -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
          -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
# Only what the project uses: shared libraries, the server; no tests, examples, web UI
# download (the build machine may reach no model hub), curl or OpenSSL.
LAYOUT=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON
        -DCMAKE_INSTALL_RPATH='$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
read -r -a EXTRA <<<"${LLAMA_CMAKE_ARGS:-}"
ARGS=("${PORTABLE[@]}" "${LAYOUT[@]}" "${EXTRA[@]}")

KEY=$(printf '%s\n' "$VERSION" "${ARGS[@]}" | sha256sum | cut -c1-12)
SRC="$WORK/llama_cpp_python-$VERSION"
BUILD="$WORK/build-$KEY"

site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
libdir="$site/llama_cpp/lib"
install_named_build() {
  local name=$1 tree=$2 build commit="" tag="" source dest vargs=()
  [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || { echo "install-llama-cpp: LLAMA_CPP_BUILD=$name is not a build name (e.g. b8642)" >&2; exit 2; }
  if [[ "$tree" == vendored ]]; then
    tree="$SRC/vendor/llama.cpp" build=$BUILD source=vendored
    [[ -f "$BUILD/.built" ]] || { echo "install-llama-cpp: build the default first (make install)" >&2; exit 2; }
  else
    tree=$(cd "$tree" && pwd) source=$tree
    # The checkout's own commit (never that of a repository the tree merely sits in), and the
    # tag when HEAD is the commit the tag NAME names (else the build is recorded without one).
    if [[ "$(git -C "$tree" rev-parse --show-toplevel 2>/dev/null)" == "$tree" ]]; then
      commit=$(git -C "$tree" rev-parse HEAD)
      if [[ "$(git -C "$tree" rev-parse -q --verify "refs/tags/$name^{commit}" 2>/dev/null)" == "$commit" ]]; then
        tag=$name
      else
        echo "install-llama-cpp: warning: $tree is not at tag $name (HEAD ${commit:0:12}): recorded without a tag" >&2
      fi
      # A shallow clone counts one commit, so llama.cpp would call itself build 1: a bNNNN tag
      # gives the number its release has (upstream numbers builds by their commit count).
      if [[ -n "$tag" && "$tag" =~ ^b([0-9]+)$ && "$(git -C "$tree" rev-parse --is-shallow-repository)" == true ]]; then
        vargs=(-DLLAMA_BUILD_NUMBER="${BASH_REMATCH[1]}" -DLLAMA_BUILD_COMMIT="$(git -C "$tree" rev-parse --short=8 HEAD)")
      fi
    fi
    build="$WORK/build-$name-$(printf '%s\n' "$tree" "${ARGS[@]}" "${vargs[@]}" | sha256sum | cut -c1-12)"
  fi
  [[ -f "$tree/CMakeLists.txt" && -d "$tree/tools/server" ]] || { echo "install-llama-cpp: $tree is not a llama.cpp source tree" >&2; exit 2; }
  if [[ ! -f "$build/.built" ]]; then
    echo "== building llama-server $name from $tree in $build with $JOBS jobs"
    "$CMAKE" -S "$tree" -B "$build" "${ARGS[@]}" "${vargs[@]}"
    "$CMAKE" --build "$build" --config Release -j "$JOBS" --target llama-server
    touch "$build/.built"
  fi
  if [[ ! -x "$build/bin/llama-quantize" ]]; then   # a build made before the quantiser was installed
    "$CMAKE" --build "$build" --config Release -j "$JOBS" --target llama-quantize
  fi
  # Into $METROBENCH_LLAMA_BUILDS when set (the rehearsal's own folder), else beside the default.
  dest="${METROBENCH_LLAMA_BUILDS:-$libdir/builds}/$name"
  rm -rf "$dest.partial" && mkdir -p "$dest.partial"
  cp -a "$build"/bin/*.so* "$build/bin/llama-server" "$build/bin/llama-quantize" "$dest.partial/"
  # The tree's converter, as it is at this build (older trees have no conversion/ folder).
  mkdir -p "$dest.partial/convert"
  cp -a "$tree/convert_hf_to_gguf.py" "$tree/gguf-py" "$dest.partial/convert/"
  [[ -d "$tree/conversion" ]] && cp -a "$tree/conversion" "$dest.partial/convert/"
  # The record `metrobench doctor` and the serving record read: what the build is (a tag, or the
  # vendored tree under a name), its commit and its CMake arguments.
  "$PY" - "$dest.partial/metrobench-build.json" "$name" "$tag" "$source" "$commit" "$VERSION" \
    "${LLAMA_CMAKE_ARGS:-}" "${ARGS[@]}" "${vargs[@]}" <<'PYEOF'
import json, sys
path, name, tag, source, commit, version, extra, *args = sys.argv[1:]
record = {"name": name, "tag": tag or None, "source": source, "commit": commit or None,
          "llama_cmake_args": extra, "cmake_args": args,
          "converter": "convert/convert_hf_to_gguf.py", "quantizer": "llama-quantize"}
if source == "vendored":
    record["llama_cpp_python"] = version
with open(path, "w") as fh:
    json.dump(record, fh, indent=1)
PYEOF
  rm -rf "$dest" && mv "$dest.partial" "$dest"
  echo "== llama-server $name installed in $dest: $("$dest/llama-server" --version 2>&1 | grep -m1 -i version || true)"
}

if [[ -z "${LLAMA_CPP_BUILD:-}" && -f "$libdir/metrobench-build.json" ]] && grep -q "\"key\": \"$KEY\"" "$libdir/metrobench-build.json" \
   && "$PY" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$VERSION')" 2>/dev/null; then
  echo "llama.cpp $VERSION ($KEY) is already installed in $VENV"
  exit 0
fi

# CMake >= 3.21 (llama-cpp-python's floor): the system's, else the one PyPI ships.
CMAKE=cmake
if ! cmake --version 2>/dev/null | "$PY" -c 'import re, sys; v = re.search(r"(\d+)\.(\d+)", sys.stdin.read()); sys.exit(not v or tuple(map(int, v.groups())) < (3, 21))'; then
  echo "== no CMake >= 3.21 on PATH: installing PyPI's cmake into $VENV"
  "$PY" -m pip install "cmake>=3.21"
  CMAKE="$VENV/bin/cmake"
fi

if [[ -n "${LLAMA_CPP_BUILD:-}" ]]; then
  install_named_build "$LLAMA_CPP_BUILD" "${LLAMA_CPP_SOURCE:?LLAMA_CPP_BUILD needs LLAMA_CPP_SOURCE: a llama.cpp checkout at that build, or vendored}"
  exit 0
fi

mkdir -p "$WORK"
sdist="$WORK/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$sdist" ]]; then
  echo "== fetching the llama-cpp-python $VERSION sdist"
  "$PY" -m pip download --no-deps --no-binary llama-cpp-python --dest "$WORK" "llama-cpp-python==$VERSION"
fi
[[ -d "$SRC" ]] || tar -xzf "$sdist" -C "$WORK"

if [[ ! -f "$BUILD/.built" ]]; then
  echo "== building llama.cpp (llama-cpp-python $VERSION) in $BUILD with $JOBS jobs:"
  echo "   ${ARGS[*]}"
  "$CMAKE" -S "$SRC/vendor/llama.cpp" -B "$BUILD" "${ARGS[@]}"
  "$CMAKE" --build "$BUILD" --config Release -j "$JOBS" --target llama ggml mtmd llama-server llama-quantize
  touch "$BUILD/.built"
fi

echo "== installing the llama-cpp-python $VERSION bindings (no second compile)"
# LLAMA_BUILD=OFF: the wheel carries only the Python package; --no-cache-dir so a native
# wheel cached by an earlier `pip install llama-cpp-python` is never picked up instead.
CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "$PY" -m pip install --no-cache-dir --no-deps \
  --force-reinstall "$sdist"
mkdir -p "$libdir"
cp -a "$BUILD"/bin/*.so* "$BUILD/bin/llama-server" "$libdir/"
ln -sf "$libdir/llama-server" "$VENV/bin/llama-server"
"$PY" - "$libdir/metrobench-build.json" "$KEY" "$VERSION" "$SRC/vendor/llama.cpp" "${ARGS[@]}" <<'PYEOF'
import json, sys
path, key, version, source, *args = sys.argv[1:]
with open(path, "w") as fh:
    json.dump({"key": key, "llama_cpp_python": version, "source": source, "cmake_args": args}, fh, indent=1)
PYEOF
echo "== llama.cpp installed: $("$VENV/bin/llama-server" --version 2>&1 | grep -m1 -i version || true)"
