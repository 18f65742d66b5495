#!/usr/bin/env bash
# Qwen3.5's gated-delta kernels into a virtual environment that already holds the training stack:
# the packages of pyproject.toml's `train-cuda` extra (flash-linear-attention, causal-conv1d), at
# the versions constraints/stack.txt pins.
#
#   scripts/install-train-cuda.sh VENV
#
# `make install` runs it when LLAMA_CMAKE_ARGS holds -DGGML_CUDA=ON or TRAIN_CUDA=1 is given.
# Each package is installed on its own and may fail softly: causal-conv1d compiles against the
# installed torch (hence --no-build-isolation) and needs the CUDA toolkit (nvcc, CUDA_HOME);
# one that does not install leaves its part of the layers on transformers' PyTorch path, which
# is correct and slower. The script says so and exits 0; `metrobench doctor` then names the
# path training takes. Only when every package installed is VENV/.train-cuda written, so a
# later `make install TRAIN_CUDA=1` tries the missing ones again.
set -uo pipefail

VENV=${1:?usage: $0 VENV}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --progress-bar off -c "$ROOT/constraints/stack.txt")

cuda=$("$PY" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null) || {
  echo "install-train-cuda: torch is not installed in $VENV: run make install first" >&2; exit 2; }
if [[ -z "$cuda" ]]; then
  echo "install-train-cuda: torch $("$PY" -c 'import torch; print(torch.__version__)') is a CPU build:" \
       "the gated-delta kernels need CUDA torch; not installed (training takes the PyTorch path)"
  exit 0
fi

# The extra's requirements as pyproject.toml writes them (markers kept; pip evaluates them).
mapfile -t packages < <("$PY" - "$ROOT/pyproject.toml" <<'PYEOF'
import sys, tomllib
extra = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["train-cuda"]
print("\n".join(r for r in extra if not r.startswith("metrobench")))
PYEOF
)
# What --no-build-isolation leaves to the environment: the build backend and its tools.
"${PIP[@]}" setuptools wheel packaging ninja >/dev/null || true

failed=()
for package in "${packages[@]}"; do
  name=${package%%[<>=;! ]*}
  echo "== installing $name (torch CUDA $cuda)"
  if ! "${PIP[@]}" --no-build-isolation "$package"; then
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  echo "install-train-cuda: ${failed[*]} did not install (causal-conv1d compiles with nvcc: CUDA_HOME set to the" \
       "toolkit of torch's CUDA $cuda); those layers take transformers' PyTorch path, slower than the paper's" \
       "27-103 min a seed: see \`metrobench doctor\`'s training path line" >&2
  exit 0
fi
touch "$VENV/.train-cuda"
echo "== gated-delta kernels installed: $("$PY" -c 'from metrobench.training.train import gated_delta_path; print(gated_delta_path())')"
