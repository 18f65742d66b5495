#!/usr/bin/env bash
# The serving half of the GPU kit in one command: llama-server's memory and tokens a second for each
# served Qwen3.5 size (2B, 4B, 9B, 27B, 35B-A3B) from random-weight GGUFs, into one table.
#
#   scripts/gpu-kit/serve.sh OUT          # on a CUDA machine, with the kit (build.sh) beside it
#   scripts/gpu-kit/serve.sh --cpu OUT    # the same steps at tiny widths on the CPU (the rehearsal)
#
# On a GPU: starts `build.sh --llama LLAMA_BUILD` in the background (llama-quantize within a minute
# or two, then llama-server with CUDA for sm_90, from the kit's llama.cpp tree; or the kit's
# prebuilt binaries), installs the kit's wheels as run.sh does (install_kit.py: the study config
# needs pydantic), and runs scripts/gpu-kit/serve.py, which writes each size's GGUF with the
# project's chain while the build runs and measures every size as soon as both are there, within
# SERVE_BUDGET seconds in all (540; a step that cannot start in time is skipped and the table says
# so). On --cpu: no build (the project's own llama-server and quantiser), tiny widths, same table.
# OUT gets table.md, table.csv, results.json, logs.tar.xz and, when the CUDA build finished here,
# the binaries for the next run: llama-bin.tar.xz, or llama-bin.tar.xz.part0, .part1 ... in 15 MiB
# parts (put them in the kit, build/gpu-kit/, and the build is skipped); at most seven files, so the
# device tool brings back all of them.
# Environment: PYTHON (python3), GPU_KIT (build/gpu-kit; for --cpu build/gpu-kit-pyX.Y if it is
# there, else none: the environment's own packages), SERVE_BUDGET (seconds), LLAMA_BUILD
# (build/gpu-kit-llama: kept between calls on a warm machine), LLAMA_KIT (the kit whose llama.cpp
# tree and tokenizer are used: GPU_KIT, or build/gpu-kit), SERVE_BUILD=1 (with --cpu: build the
# kit's llama.cpp here, CPU-only, and serve with it: the GPU run's build, converter and quantiser,
# rehearsed), SERVE_WORK (a temporary folder, removed at the end unless SERVE_KEEP=1).
# With the device tool: carry: ["build/gpu-kit"], timeout_s: 600.
set -uo pipefail
cd "$(dirname "$0")/../.."
CPU=0
if [[ "${1:-}" == "--cpu" ]]; then CPU=1; shift; fi
if [[ $# -ne 1 ]]; then echo "usage: scripts/gpu-kit/serve.sh [--cpu] OUT" >&2; exit 2; fi
OUT=$1
t0=$(date +%s)
PY=${PYTHON:-python3}
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if (( CPU )); then
  KIT=${GPU_KIT:-build/gpu-kit-py$pyver}
  [[ -z "${GPU_KIT:-}" && ! -f "$KIT/.gpu-kit" ]] && KIT=none
  BUDGET=${SERVE_BUDGET:-480}
else
  KIT=${GPU_KIT:-build/gpu-kit}; BUDGET=${SERVE_BUDGET:-540}
fi
BUILD=${LLAMA_BUILD:-build/gpu-kit-llama}
WORK=${SERVE_WORK:-$(mktemp -d /tmp/gpu-kit-serve.XXXXXX)}
mkdir -p "$OUT" "$WORK/logs"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 \
  HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error

build_pid="" site=""
cleanup() {
  [[ -n "$build_pid" ]] && kill -- "-$build_pid" 2>/dev/null
  [[ -n "$site" ]] && rm -rf "$site"
  [[ "${SERVE_KEEP:-0}" == 1 || -n "${SERVE_WORK:-}" ]] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

if [[ "$KIT" != none && ! -f "$KIT/.gpu-kit" ]]; then
  echo "serve.sh: error: $KIT: no kit (build it: PYTHON=.venv/bin/python scripts/gpu-kit/build.sh$( (( CPU )) && echo " --python $pyver $KIT"))" >&2
  exit 2
elif [[ "$KIT" != none && "$(cat "$KIT/.gpu-kit")" != "python $pyver" ]]; then
  echo "serve.sh: error: $KIT was built for $(cat "$KIT/.gpu-kit"), this is python $pyver" >&2
  exit 2
fi
# The llama.cpp build from the kit's tree: on a GPU always, first (the longest step); with --cpu only
# when SERVE_BUILD=1, which rehearses the GPU run's build, converter and quantiser here (CPU-only).
LLAMA_KIT=${LLAMA_KIT:-$KIT}
[[ "$LLAMA_KIT" == none ]] && LLAMA_KIT=build/gpu-kit
if (( ! CPU )) || [[ "${SERVE_BUILD:-0}" == 1 ]]; then
  if [[ ! -f "$LLAMA_KIT/llama.cpp.tar.xz" ]]; then
    echo "serve.sh: error: $LLAMA_KIT/llama.cpp.tar.xz: no llama.cpp tree (PYTHON=.venv/bin/python scripts/gpu-kit/build.sh)" >&2
    exit 2
  fi
  mkdir -p "$BUILD"
  GPU_KIT=$LLAMA_KIT PYTHON=$PY setsid scripts/gpu-kit/build.sh --llama $( (( CPU )) && echo --cpu ) "$BUILD" \
    >"$WORK/logs/build-stdout.log" 2>&1 &
  build_pid=$!
fi
if [[ "$KIT" == none ]]; then
  echo "kit: none (the environment's own packages)"
else
  site=$(mktemp -d /tmp/gpu-kit-site.XXXXXX)
  "$PY" scripts/gpu-kit/install_kit.py "$KIT" "$site" "$WORK/kit.json" || exit 1
fi
export PYTHONPATH="${site:+$site:}$PWD${PYTHONPATH:+:$PYTHONPATH}"
(( CPU )) && export CUDA_VISIBLE_DEVICES=""

args=(run "$OUT" --work "$WORK" --budget "$BUDGET" --t0 "$t0")
(( CPU )) && args+=(--cpu)
[[ -n "$build_pid" ]] && args+=(--build "$BUILD")
[[ -f "$LLAMA_KIT/tokenizer/tokenizer.json" ]] && args+=(--kit "$LLAMA_KIT")
"$PY" scripts/gpu-kit/serve.py "${args[@]}"
rc=$?

if [[ -n "$build_pid" && -f "$BUILD/.server-ready" ]] && ! compgen -G "$LLAMA_KIT/llama-bin.tar.xz*" >/dev/null; then
  # bring the binaries back once (the device tool brings back 8 files of at most 16 MiB)
  ( cd "$BUILD" && find host/bin cuda/bin -maxdepth 1 \( -type f -o -type l \) \( -name 'llama-server' -o \
      -name 'llama-quantize' -o -name '*.so*' \) -print0 2>/dev/null | LC_ALL=C sort -z |
    XZ_OPT="-T0" tar --null -T - -cJf "$WORK/llama-bin.tar.xz" .key --owner=0 --group=0 --mtime=@0 )
  bytes=$(stat -c %s "$WORK/llama-bin.tar.xz" 2>/dev/null || echo 0)
  if (( bytes == 0 )); then
    echo "llama.cpp binaries: not packed"
  elif (( bytes <= 15 * 1024 * 1024 )); then
    mv "$WORK/llama-bin.tar.xz" "$OUT/llama-bin.tar.xz"
    echo "llama.cpp binaries: $OUT/llama-bin.tar.xz ($bytes bytes): copy it to $LLAMA_KIT/ to skip the build next time"
  elif (( bytes <= 3 * 15 * 1024 * 1024 )); then   # in parts of 15 MiB: the tool brings back 16 MiB a file
    split -b 15M -d -a 1 "$WORK/llama-bin.tar.xz" "$OUT/llama-bin.tar.xz.part"
    echo "llama.cpp binaries: $OUT/llama-bin.tar.xz.part* ($bytes bytes in $(ls "$OUT"/llama-bin.tar.xz.part* | wc -l)" \
         "parts): copy them to $LLAMA_KIT/ to skip the build next time"
  else
    echo "llama.cpp binaries: $bytes bytes packed, more than three parts of 15 MiB: not kept"
  fi
fi
echo "serve.sh: $(( $(date +%s) - t0 )) s (budget $BUDGET s)"
exit $rc
