#!/usr/bin/env bash
# The GPU check in one command. Two halves, one table each:
# * --train: QLoRA peak memory at the real Qwen3.5 widths, and the gated-delta layer's speed on each
#   path (OUT/table.md, OUT/results.json; the rest of this script);
# * --serve: llama-server's memory and tokens a second per served size (serve.sh, which this hands to).
# Told neither, it measures the half the repository lacks (next_half.py): the serving half until a
# serving table measured on a GPU is recorded under benchmarks/recorded/, the training half after.
# It says which, and why, on its first line.
#
#   scripts/gpu-kit/run.sh [--train|--serve] OUT          # on a CUDA machine, the kit (build.sh) beside it
#   scripts/gpu-kit/run.sh --cpu [--train|--serve] OUT    # the same steps at tiny widths on the CPU (the rehearsal)
#
# Installs the kit's wheels into a temporary folder put first on PYTHONPATH (install_kit.py; the
# image's torch and site-packages are not touched), prints the device, checks that the project
# and its training stack import, then runs benchmarks/real_width_qlora.py once per step (one
# process each) under `timeout`, within GPU_KIT_BUDGET seconds in all (540 on a GPU): a step
# gets what is left, one that cannot start in time is skipped and the table says so.
# Environment: PYTHON (python3), GPU_KIT (build/gpu-kit; for --cpu build/gpu-kit-pyX.Y, or
# `none` to use the environment's own packages), GPU_KIT_BUDGET (seconds).
# With the device tool: carry: ["build/gpu-kit"] (build/ is ignored by git, so it does not
# travel otherwise). Order: the 27B rows first (the 32 GB question), then 9B, 4B, 2B. If the
# fast-kernel layer step fails, the trainings after it run on PyTorch's gated-delta path.
set -uo pipefail
cd "$(dirname "$0")/../.."
CPU=0 HALF=""
while [[ "${1:-}" == --* ]]; do
  case $1 in
    --cpu) CPU=1 ;;
    --train|--serve) HALF=${1#--} ;;
    *) echo "run.sh: error: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ $# -ne 1 ]]; then echo "usage: scripts/gpu-kit/run.sh [--cpu] [--train|--serve] OUT" >&2; exit 2; fi
OUT=$1
PY=${PYTHON:-python3}
if [[ -z "$HALF" ]]; then
  { read -r HALF; read -r why; } < <("$PY" scripts/gpu-kit/next_half.py)
  [[ $HALF == serve || $HALF == train ]] || { echo "run.sh: error: next_half.py chose nothing" >&2; exit 2; }
  echo "run.sh: the $([[ $HALF == serve ]] && echo serving || echo training) half ($why)"
fi
if [[ $HALF == serve ]]; then exec scripts/gpu-kit/serve.sh $( (( CPU )) && echo --cpu ) "$OUT"; fi
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if (( CPU )); then KIT=${GPU_KIT:-build/gpu-kit-py$pyver}; BUDGET=${GPU_KIT_BUDGET:-480}; MIN=5
else KIT=${GPU_KIT:-build/gpu-kit}; BUDGET=${GPU_KIT_BUDGET:-540}; MIN=25; fi
RESERVE=10                       # for the table at the end
t0=$(date +%s)
mkdir -p "$OUT/runs" "$OUT/logs"
: >"$OUT/steps.tsv"
export PYTHONDONTWRITEBYTECODE=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}   # as `metrobench train`

site=""
if [[ "$KIT" == none ]]; then
  echo "kit: none (the environment's own packages)" | tee "$OUT/kit.txt"
elif [[ ! -f "$KIT/.gpu-kit" ]]; then
  hint="scripts/gpu-kit/build.sh"; (( CPU )) && hint+=" --python $pyver $KIT"
  echo "run.sh: error: $KIT: no kit (build it: $hint; or GPU_KIT=none to go without)" >&2
  exit 2
elif [[ "$(cat "$KIT/.gpu-kit")" != "python $pyver" ]]; then
  echo "run.sh: error: $KIT was built for $(cat "$KIT/.gpu-kit"), this is python $pyver" >&2
  exit 2
else
  site=$(mktemp -d /tmp/gpu-kit-site.XXXXXX)
  trap 'rm -rf "$site"' EXIT
  "$PY" scripts/gpu-kit/install_kit.py "$KIT" "$site" "$OUT/kit.json" | tee "$OUT/kit.txt" || exit 1
fi
export PYTHONPATH="${site:+$site:}$PWD${PYTHONPATH:+:$PYTHONPATH}"
(( CPU )) && export CUDA_VISIBLE_DEVICES=""

"$PY" - "$OUT/device.json" <<'EOF' | tee "$OUT/device.txt"
import json, platform, sys
import torch
cuda = torch.cuda.is_available()
d = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
     "device": torch.cuda.get_device_name(0) if cuda else "cpu",
     "capability": ".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else None,
     "memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 2) if cuda else None}
json.dump(d, open(sys.argv[1], "w"), indent=2)
print("device: " + ", ".join(f"{k} {v}" for k, v in d.items()))
EOF
command -v nvidia-smi >/dev/null && nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
if (( ! CPU )) && ! grep -q '"capability": "' "$OUT/device.json"; then
  echo "run.sh: error: torch sees no CUDA device (run.sh --cpu for the rehearsal)" >&2; exit 2
fi
if ! "$PY" -c 'import metrobench.training.train, metrobench.training.recipe, trl, datasets, bitsandbytes, peft
from metrobench.training.train import gated_delta_path; print("imports: ok;", gated_delta_path())' \
    >"$OUT/imports.txt" 2>&1; then
  cat "$OUT/imports.txt" >&2; echo "run.sh: error: the training stack does not import (above)" >&2; exit 1
fi
cat "$OUT/imports.txt"

# name | cap seconds (GPU) | cap seconds (CPU) | arguments of real_width_qlora.py
STEPS=(
  "layer-27b-torch|60|60|--layer --size 27b --seq 2048 --batch 2 --gated-delta torch"
  "layer-27b-fast|150|60|--layer --size 27b --seq 2048 --batch 2"
  "27b-paper|150|90|--size 27b --recipe peft/recipes/27b.yaml"
  "27b-corrected|150|90|--size 27b --recipe peft/recipes/27b-corrected.yaml"
  "27b-paper-lora-other|120|90|--size 27b --recipe peft/recipes/27b.yaml --lora-dtype other"
  "9b-paper|100|90|--size 9b --recipe peft/recipes/9b.yaml"
  "4b-paper|80|90|--size 4b --recipe peft/recipes/4b.yaml"
  "2b-paper|70|90|--size 2b --recipe peft/recipes/2b.yaml"
)
QLORA_PATH=""
for step in "${STEPS[@]}"; do
  IFS='|' read -r name gpu_cap cpu_cap rest <<<"$step"
  cap=$(( CPU ? cpu_cap : gpu_cap ))
  left=$(( BUDGET - RESERVE - ($(date +%s) - t0) ))
  if (( left < MIN )); then
    printf '%s\tskipped\t%s s of the budget left\t0\n' "$name" "$left" >>"$OUT/steps.tsv"
    echo "== $name: skipped ($left s left of $BUDGET)"; continue
  fi
  limit=$(( cap < left ? cap : left ))
  echo "== $name (at most $limit s)"
  s0=$(date +%s)
  [[ $name != layer-* ]] && rest+=" $QLORA_PATH"
  # shellcheck disable=SC2086 - the step's arguments are words
  timeout -k 10 "$limit" "$PY" benchmarks/real_width_qlora.py $rest $( (( CPU )) && echo --cpu ) \
    --out "$OUT/runs/$name.json" >"$OUT/logs/$name.log" 2>&1
  rc=$?
  took=$(( $(date +%s) - s0 ))
  case $rc in
    0) status=ok; why="" ;;
    124|137) status=timeout; why="stopped at its $limit s limit" ;;
    *) status=failed; why="exit $rc: $(grep -v '^\s*$' "$OUT/logs/$name.log" | tail -1 | cut -c1-160 | tr '\t' ' ')" ;;
  esac
  if [[ $name == layer-27b-fast && $status != ok ]]; then
    # The fast kernels do not run here (a Triton or fla problem): the trainings take PyTorch's path
    # rather than fail one after another, and the table's gated-delta column says so.
    QLORA_PATH="--gated-delta torch"; why+="${why:+; }the trainings below run with --gated-delta torch"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$why" "$took" >>"$OUT/steps.tsv"
  echo "   $status in $took s${why:+ ($why)}"
done
"$PY" scripts/gpu-kit/table.py "$OUT" "$(( $(date +%s) - t0 ))" "$BUDGET"
cat "$OUT/table.md"
