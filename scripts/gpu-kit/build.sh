#!/usr/bin/env bash
# The GPU kit: the wheels a bare CUDA image (torch, transformers, peft, accelerate, pandas,
# pyarrow; no network) lacks to run the project's QLoRA training, downloaded here once.
#
#   scripts/gpu-kit/build.sh [--python 3.12] [DEST]      # DEST defaults to build/gpu-kit
#
# Wheels of scripts/gpu-kit/requirements.txt (pinned and hash-checked, no dependencies, binary
# only, manylinux x86_64 for the given CPython), bitsandbytes repacked with only its CPU and
# CUDA 13.0 libraries (repack_wheel.py). Prints the kit's size and refuses one over 20 MiB.
# Same inputs, same bytes: DEST/SHA256SUMS lists every file. build/ is ignored by git, so the
# device tool carries the kit only when asked: `carry: ["build/gpu-kit"]` (docs/paper-study.md).
# `--python 3.11 build/gpu-kit-py311` builds the same kit for this CPU machine's interpreter,
# which the CPU rehearsal (run.sh --cpu) installs the same way.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=scripts/gpu-kit
PYVER=3.12
if [[ "${1:-}" == "--python" ]]; then PYVER=$2; shift 2; fi
DEST=${1:-build/gpu-kit}
PY=${PYTHON:-python3}
LIMIT=$((20 * 1024 * 1024))
MARK=.gpu-kit

if [[ -e "$DEST" && ! -e "$DEST/$MARK" && -n "$(ls -A "$DEST")" ]]; then
  echo "build.sh: error: $DEST exists and is not a GPU kit (no $MARK); not touching it" >&2
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
touch -d @0 "$DEST"/wheels/*.whl
echo "python $PYVER" >"$DEST/$MARK"
(cd "$DEST" && sha256sum wheels/*.whl | LC_ALL=C sort -k2 >SHA256SUMS)
bytes=$(cat "$DEST"/wheels/*.whl | wc -c)
printf 'gpu kit: %s (%d wheels, CPython %s): %d bytes = %.2f MiB (limit 20 MiB); sha256 of SHA256SUMS %s\n' \
  "$DEST" "$(ls "$DEST"/wheels/*.whl | wc -l)" "$PYVER" "$bytes" "$(echo "$bytes / 1048576" | bc -l)" \
  "$(sha256sum "$DEST/SHA256SUMS" | cut -c1-16)"
if (( bytes > LIMIT )); then
  echo "build.sh: error: the kit is $bytes bytes, over the 20 MiB limit" >&2
  exit 1
fi
